"""Every rule of SPEC §3: one configuration that passes and one that fails.

Expectations come from SPEC.md, not from running the engine: each failing case asserts the
violation's rule id, phase, backend, observed value and requirement (SPEC §9), and each passing
case asserts the rule's verdict in the trace (SPEC §5: "every rule evaluated ... with its verdict").
"""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.render import finish
from attnplan.policy import AttentionConfig, Fact, NodeFacts, simulated_node

SUPPORTED = policy.SUPPORTED_FLASHINFER
STD = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
DEEPSEEK = dict(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_qo_heads=128)


# -- helpers -----------------------------------------------------------------------------
def cfg(**kw) -> AttentionConfig:
    data = dict(STD)
    data.update(kw)
    return AttentionConfig(**data)


def mla(**kw) -> AttentionConfig:
    data = dict(DEEPSEEK)
    data.update(kw)
    return AttentionConfig(**data)


def run(config: AttentionConfig, node: NodeFacts, engine: str | None = None) -> policy.PlanAnswer:
    """The whole answer (plan_for: evaluate, then verified suggestions) for one engine layer, finished: its notes and
    suggestions worded by render/ from the planner's data (issue 36 item 6)."""
    return finish(policy.plan_for(config, node, engine=engine))


FI = "flashinfer"   # the kernel layer alone


def viols(answer, rule, phase=None, backend="__any__"):
    return [v for v in answer.violations
            if v.rule == rule and (phase is None or v.phase == phase)
            and (backend == "__any__" or v.backend == backend)]


def the_violation(answer, rule, phase, backend):
    found = viols(answer, rule, phase, backend)
    assert len(found) == 1, (rule, phase, backend, answer.violations)
    v = found[0]
    assert v.message, "a violation carries a message"
    assert v.required, "a violation says what the rule requires"
    return v


def verdicts(answer, rule, phase=None, backend="__any__") -> set[str]:
    return {e.verdict for e in answer.trace
            if e.rule == rule and (phase is None or e.phase == phase)
            and (backend == "__any__" or e.backend == backend)}


def assert_passes(answer, rule, phase, backend):
    """The rule was evaluated for (phase, backend) and did not fail."""
    got = verdicts(answer, rule, phase, backend)
    assert got, f"{rule} not evaluated for {phase}/{backend}"
    assert "fail" not in got, (rule, phase, backend, got)
    assert not viols(answer, rule, phase, backend)


def obs(v, fact: str | None = None) -> str:
    """The observed value (of ``fact``, where the violation observed several)."""
    if isinstance(v.observed, dict) and fact is not None:
        return str(v.observed[fact])
    return str(v.observed)


def cubins_missing(dev: str = "B200", **kw) -> NodeFacts:
    """A 10.x node with no way to get trtllm-gen cubins (no dir, no wheel, artifactory down)."""
    return simulated_node(dev, **kw).with_fact(
        cubin_dir=Fact.measured(None), cubin_dir_has_cubins=Fact.measured(False),
        flashinfer_cubin_version=Fact.measured(None), artifactory_reachable=Fact.measured(False))


TRT = "trtllm-gen"


# -- device.cuda -------------------------------------------------------------------------
def test_device_cuda_passes_with_a_device():
    a = run(cfg(), simulated_node("A100"))
    assert a.ok
    assert verdicts(a, "device.cuda", "both", None) == {"pass"}


@pytest.mark.parametrize("cap_fact", [Fact.unknown("no GPU"), Fact.measured(None, "NVML")])
def test_device_cuda_fails_closed_without_a_capability(cap_fact):
    node = NodeFacts(capability=cap_fact, flashinfer_version=Fact.measured(SUPPORTED))
    a = run(cfg(), node)
    assert a.status == "rejected" and a.plan is None
    v = the_violation(a, "device.cuda", "both", None)
    assert v.observed in (None, "unknown")
    assert "capability" in v.required


# -- device.capability -------------------------------------------------------------------
@pytest.mark.parametrize("dev", ["A100", "RTX 3090", "L40S", "H100", "RTX PRO 6000", "DGX Spark", "Jetson Thor"])
def test_device_capability_passes_between_80_and_121(dev):
    a = run(cfg(), simulated_node(dev))
    assert a.ok, a.violations
    assert_passes(a, "device.capability", "prefill", a.plan.prefill.backend)
    assert_passes(a, "device.capability", "decode", a.plan.decode.backend)


@pytest.mark.parametrize("dev,cap", [("T4", "7.5"), ("V100", "7.0")])
def test_device_capability_excludes_sm75_and_older(dev, cap):
    a = run(cfg(), simulated_node(dev))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "device.capability", phase, "fa2")
        assert obs(v) == cap
        assert "8.0" in v.required


def test_device_capability_upper_bound():
    a = run(cfg(), simulated_node(capability="13.0"))
    assert a.status == "rejected"
    v = the_violation(a, "device.capability", "decode", "fa2")
    assert obs(v) == "13.0"
    assert "12.1" in v.required


# -- heads.gqa ---------------------------------------------------------------------------
def test_heads_gqa_passes_when_divisible():
    a = run(cfg(num_qo_heads=32, num_kv_heads=8), simulated_node("H100"))
    assert a.ok
    assert verdicts(a, "heads.gqa", "both", None) == {"pass"}


@pytest.mark.parametrize("dev", ["B200", "H100", "A100"])
def test_heads_gqa_fails_when_not_divisible(dev):
    a = run(cfg(num_qo_heads=32, num_kv_heads=12), simulated_node(dev))
    assert a.status == "rejected"
    v = the_violation(a, "heads.gqa", "both", None)
    assert "32" in obs(v) or "12" in obs(v)
    assert "num_kv_heads" in v.required


# -- dtype.query -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_dtype_query_16bit_passes_everywhere(dtype):
    for dev in ("A100", "H100", "B200"):
        a = run(cfg(dtype=dtype), simulated_node(dev))
        assert a.ok
        assert_passes(a, "dtype.query", "decode", a.plan.decode.backend)


def test_dtype_query_fp32_fails_on_fa2():
    a = run(cfg(dtype="fp32"), simulated_node("A100"))
    assert a.status == "rejected"
    v = the_violation(a, "dtype.query", "prefill", "fa2")
    assert obs(v) == "fp32"
    assert "fp16" in v.required and "bf16" in v.required


@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "nvfp4"])
def test_dtype_query_fp8_query_over_quantized_kv_passes_on_trtllm(kv):
    a = run(cfg(dtype="fp8_e4m3", kv_cache_dtype=kv, attention_backend=TRT), simulated_node("B200"))
    assert a.ok, a.violations
    assert_passes(a, "dtype.query", "prefill", TRT)
    assert a.plan.prefill.query_dtype == "float8_e4m3fn"


def test_dtype_query_fp8_query_over_16bit_kv_fails_on_trtllm():
    a = run(cfg(dtype="fp8_e4m3", kv_cache_dtype="bf16", attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "dtype.query", phase, TRT)
        assert "fp8_e4m3" in obs(v)


def test_dtype_query_fp8_query_fails_on_native():
    a = run(cfg(dtype="fp8_e4m3", kv_cache_dtype="fp8", attention_backend="fa2"), simulated_node("B200"))
    assert a.status == "rejected"
    v = the_violation(a, "dtype.query", "decode", "fa2")
    assert obs(v) == "fp8_e4m3"


# -- head-size ---------------------------------------------------------------------------
@pytest.mark.parametrize("hd", [64, 128, 256])
def test_head_size_whitelist_fa2(hd):
    a = run(cfg(head_dim=hd, attention_backend="fa2"), simulated_node("A100"))
    assert a.ok
    assert_passes(a, "head-size", "prefill", "fa2")


@pytest.mark.parametrize("engine", [None, FI])
@pytest.mark.parametrize("hd", [80, 96, 192])
def test_head_size_outside_fa2_whitelist(hd, engine):
    # measured on the H100: fa2's split-KV merge kernel refuses 80 and 96 ("Unsupported head_dim: 96")
    a = run(cfg(head_dim=hd), simulated_node("A100"), engine)
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "head-size", phase, "fa2")
        assert str(hd) in obs(v)
        assert all(str(x) in v.required for x in (64, 128, 256, 512))
        assert v.layer == "kernel"


@pytest.mark.parametrize("engine", [None, FI])
def test_head_size_512_runs_fa2_off_10x_jit_only(engine):
    """v2: fa2 runs head_dim 512 (measured on the H100), JIT-only: it needs a JIT toolchain."""
    a = run(cfg(head_dim=512), simulated_node("A100"), engine)
    assert a.ok, a.violations
    assert a.backends() == ("fa2", "fa2")
    assert_passes(a, "jit.toolchain", "prefill", "fa2")
    no_jit = simulated_node("A100").with_fact(jit_toolchain=Fact.measured(False, "no nvcc"))
    b = run(cfg(head_dim=512), no_jit, engine)
    assert b.status == "rejected"
    assert the_violation(b, "jit.toolchain", "prefill", "fa2").observed == "false"


def test_head_size_xqa_decodes_96_but_vllm_lists_64_128_256_512():
    node = simulated_node("H100")
    k = run(cfg(head_dim=96, attention_backend="xqa"), node, FI)
    assert not viols(k, "head-size", "decode", "xqa")          # XQA decodes 96 (measured)
    assert the_violation(k, "head-size", "prefill", "fa2")      # but nothing prefills it
    v = run(cfg(head_dim=96, attention_backend="xqa"), node)
    ev = the_violation(v, "vllm.head-size", "decode", "xqa")
    assert ev.layer == "engine" and "512" in ev.required


@pytest.mark.parametrize("hd", [144, 160, 176])
def test_head_size_xqa_16bit_cache_does_not_build_144_to_176_on_9x(hd):
    # the H100 sweep, 2026-11-25: every 16-bit XQA module at these heads failed to build
    h100 = simulated_node("H100")
    for dtype in ("bf16", "fp16"):
        a = run(cfg(head_dim=hd, dtype=dtype, attention_backend="xqa"), h100, FI)
        assert "16-bit cache" in the_violation(a, "head-size", "decode", "xqa").message
    assert not viols(run(cfg(head_dim=hd, kv_cache_dtype="fp8", attention_backend="xqa"), h100, FI),
                     "head-size", "decode", "xqa")                        # an fp8 cache built them
    for ok in (112, 128, 192, 208):                                        # the heads around them built
        assert not viols(run(cfg(head_dim=ok, attention_backend="xqa"), h100, FI), "head-size", "decode", "xqa")
    assert not viols(run(cfg(head_dim=hd, attention_backend="xqa"), simulated_node("RTX PRO 6000"), FI),
                     "head-size", "decode", "xqa")                        # measured on 9.x only


def test_xqa_16bit_group_64_builds_up_to_head_128_and_decodes_spec_only_to_group_32():
    h100 = simulated_node("H100")
    g64 = dict(num_qo_heads=64, num_kv_heads=1, attention_backend="xqa")
    assert not viols(run(cfg(head_dim=128, **g64), h100, FI), "xqa.group", "decode", "xqa")
    v = the_violation(run(cfg(head_dim=192, **g64), h100, FI), "xqa.group", "decode", "xqa")
    assert "57-64 only up to head 128" in v.message
    assert not viols(run(cfg(head_dim=128, kv_cache_dtype="fp8", num_qo_heads=32, num_kv_heads=1,
                             attention_backend="xqa"), h100, FI), "xqa.group", "decode", "xqa")
    # head 256 at group 32 over fp8 faulted on the H100 (issue 38: an illegal memory access)
    v = the_violation(run(cfg(head_dim=256, kv_cache_dtype="fp8", num_qo_heads=32, num_kv_heads=1,
                              attention_backend="xqa"), h100, FI), "xqa.group", "decode", "xqa")
    assert "illegal memory access" in v.message
    spec = run(cfg(head_dim=128, num_speculative_tokens=1, **g64), h100, FI)
    assert "computed wrong at GQA group 64" in the_violation(spec, "xqa.spec-group", "decode", "xqa").message
    assert not viols(spec, "xqa.group", "decode", "xqa")     # wrong numerics carry their own id
    g32 = dict(num_qo_heads=32, num_kv_heads=1, attention_backend="xqa")
    assert not viols(run(cfg(head_dim=128, num_speculative_tokens=3, **g32), h100, FI), "xqa.spec-group")
    assert not viols(run(cfg(head_dim=128, num_speculative_tokens=1, kv_cache_dtype="fp8", **g64), h100, FI),
                     "xqa.spec-group")                        # fp8 runs the GMMA kernel, not this path
    auto = run(cfg(head_dim=128, num_speculative_tokens=1, num_qo_heads=64, num_kv_heads=1), h100, FI)
    assert auto.ok and auto.plan.decode.backend == "fa2"       # the flashinfer engine decodes it on fa2
    vllm = run(cfg(head_dim=128, num_speculative_tokens=1, num_qo_heads=64, num_kv_heads=1,
                   attention_backend="flashinfer"), h100)
    assert not vllm.ok and viols(vllm, "xqa.spec-group", "decode", "xqa")   # vLLM 0.33 would pick XQA


def test_fa3_fp8_query_drops_no_soft_cap_it_is_refused():
    # bench/logs/h100-2026-11-25b machine 1: fa3's fp8 variant (DefaultFP8Attention) ran a soft cap of 30
    # uncapped in both phases (rel err 0.61-11.7); 16-bit fa3 applies it, fp8 without a cap ran.
    h100 = simulated_node("H100")
    shape = dict(head_dim=64, num_qo_heads=8, num_kv_heads=2)
    fp8 = dict(dtype="fp8_e4m3", kv_cache_dtype="fp8", attention_backend="fa3", **shape)
    capped = run(cfg(logits_soft_cap=30.0, **fp8), h100, FI)
    for phase in ("prefill", "decode"):
        v = the_violation(capped, "fa3.fp8-softcap", phase, "fa3")
        assert "no logits soft-cap" in v.message and obs(v) == "30.0"
    assert run(cfg(**fp8), h100, FI).ok                                    # fp8 without a cap runs
    assert run(cfg(logits_soft_cap=30.0, attention_backend="fa3", **shape), h100, FI).ok   # 16-bit fa3 caps
    # the flashinfer engine prefills the capped model over fp8 on fa2 with a 16-bit query ...
    auto = run(cfg(logits_soft_cap=30.0, kv_cache_dtype="fp8", **shape), h100, FI)
    assert auto.ok and auto.plan.prefill.backend == "fa2" and auto.plan.prefill.query_dtype == "bfloat16"
    # ... while vLLM 0.33 quantizes that query to fp8 on 9.0 (get_q_data_type), so fa3 would drop the cap
    vllm = run(cfg(logits_soft_cap=30.0, kv_cache_dtype="fp8", attention_backend="flashinfer", **shape), h100)
    assert not vllm.ok and viols(vllm, "fa3.fp8-softcap", "prefill", "fa3")


def test_head_size_fa2_needs_qk_equal_vo():
    a = run(cfg(head_dim=128, head_dim_vo=64), simulated_node("A100"))
    assert a.status == "rejected"
    v = the_violation(a, "head-size", "prefill", "fa2")
    assert obs(v) == "64"
    assert "head_dim_vo" in v.required


def test_head_size_fa3_192_128_only_on_the_mla_ragged_prefill():
    # (192, 128) builds for fa3's ragged MLA prefill only: the paged calls a non-MLA model runs
    # refused it on the H100 sweep (bench/logs/h100-2026-11-24d), so head-size refuses it there.
    a = run(cfg(head_dim=192, head_dim_vo=128), simulated_node("H100"))
    assert a.status == "rejected"
    v = the_violation(a, "head-size", "prefill", "fa3")
    assert "192" in obs(v)
    v = the_violation(a, "head-size", "decode", "fa2")
    assert "192" in obs(v)
    ok = run(cfg(head_dim=128, head_dim_vo=128, attention_backend="fa3"), simulated_node("H100"))
    assert not viols(ok, "head-size", "prefill", "fa3")


def test_head_size_fa3_rejects_512():
    a = run(cfg(head_dim=512, attention_backend="fa3"), simulated_node("H100"))
    assert a.status == "rejected"
    v = the_violation(a, "head-size", "prefill", "fa3")
    assert "512" in obs(v)


@pytest.mark.parametrize("hd", [64, 128, 256, 512])
def test_head_size_trtllm_whitelist(hd):
    a = run(cfg(head_dim=hd, attention_backend=TRT), simulated_node("B200"))
    assert a.ok, a.violations
    assert_passes(a, "head-size", "decode", TRT)


def test_head_size_trtllm_rejects_96():
    a = run(cfg(head_dim=96, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    v = the_violation(a, "head-size", "decode", TRT)
    assert obs(v) == "96"
    assert "512" in v.required


# -- page-size ---------------------------------------------------------------------------
@pytest.mark.parametrize("page", [16, 32, 64])
def test_page_size_native_accepts(page):
    a = run(cfg(page_size=page), simulated_node("A100"))
    assert a.ok and a.plan.kv_cache.page_size == page
    assert_passes(a, "vllm.page-size", "prefill", "fa2")


@pytest.mark.parametrize("page", [1, 8, 128, 256])
def test_page_size_native_any_in_flashinfer_but_vllm_takes_16_32_64(page):
    """v2: FlashInfer's native kernels take any page size (1, 8, 128, 256 measured on fa2 and fa3);
    vLLM 0.33 allows 16/32/64 there (128+ only for trtllm-gen GQA on 10.x)."""
    k = run(cfg(page_size=page), simulated_node("A100"), FI)
    assert k.ok and k.plan.kv_cache.page_size == page
    a = run(cfg(page_size=page), simulated_node("A100"))
    if page % 16 == 0:   # issue 21: a multiple of a kernel page is a valid vLLM block, run on kernel pages of 64
        assert a.ok and (a.plan.kv_cache.block_size, a.plan.kv_cache.page_size) == (page, 64)
        return
    assert a.status == "rejected"
    found = viols(a, "vllm.page-size", "decode", "fa2")     # the list check, and "over 64 needs trtllm-gen decode"
    assert found and all(v.layer == "engine" for v in found)
    v = found[0]
    assert obs(v, "config.page_size") == str(page)
    assert all(str(x) in v.required for x in (16, 32, 64))


def test_page_size_trtllm_accepts_128():
    a = run(cfg(page_size=128), simulated_node("B200"))
    assert a.ok
    assert a.backends() == (TRT, TRT)
    assert a.plan.kv_cache.page_size == 128
    assert_passes(a, "page-size", "prefill", TRT)


def test_page_size_128_forced_fa2_on_b200_runs_kernel_pages_of_64():
    # vLLM asserts kernel pages > 64 only with trtllm-gen decode (FlashInferMetadataBuilder); a block of 128
    # runs fa2 on kernel pages of 64 (issue 21: select_common_block_size)
    a = run(cfg(page_size=128, attention_backend="fa2"), simulated_node("B200"))
    assert a.ok and (a.plan.kv_cache.block_size, a.plan.kv_cache.page_size) == (128, 64)
    assert_passes(a, "vllm.page-size", "decode", "fa2")
    assert run(cfg(page_size=128, attention_backend="fa2"), simulated_node("B200"), FI).plan.kv_cache.page_size == 128


def test_page_size_trtllm_large_pages_for_gqa_only():
    gqa = run(cfg(page_size=256), simulated_node("B200"))
    assert gqa.ok and gqa.backends() == (TRT, TRT)
    mha = run(cfg(page_size=256, num_kv_heads=32), simulated_node("B200"))    # MHA: no large kernel pages
    assert mha.ok and mha.plan.kv_cache.page_size == 64                         # vLLM: block 256 on pages of 64
    a = run(cfg(page_size=256, num_kv_heads=32, attention_backend=TRT), simulated_node("B200"), FI)
    assert a.status == "rejected"
    v = the_violation(a, "page-size", "prefill", TRT)
    assert obs(v, "config.page_size") == "256"
    assert "128" in v.required
    # forced: trtllm-gen alone is tried (the kernel layer has no vllm.page-size)
    assert not viols(a, "vllm.page-size")


# -- fa3.arch / fa3.dtype ----------------------------------------------------------------
@pytest.mark.parametrize("dev", ["H100", "H200", "GH200", "H20"])
def test_fa3_arch_hopper_prefill_runs_fa3(dev):
    a = run(cfg(), simulated_node(dev))
    assert a.ok
    assert a.backends() == ("fa3", "xqa")            # vLLM 0.33: XQA decode on 9.0
    assert_passes(a, "fa3.arch", "prefill", "fa3")
    assert run(cfg(), simulated_node(dev), FI).backends() == ("fa3", "fa2")


def test_fa3_toolchain_needs_torch_cuda_12_3():
    old = simulated_node("H100").with_fact(torch_cuda_version=Fact.measured("12.1"))
    a = run(cfg(), old, FI)
    assert a.ok and a.backends() == ("fa2", "fa2")
    assert any("fa3.toolchain" in n for n in a.notes)
    forced = run(cfg(attention_backend="fa3"), old, FI)
    assert the_violation(forced, "fa3.toolchain", "prefill", "fa3").observed == "12.1"


def test_fa3_fp8_query_over_fp8_kv():
    a = run(cfg(dtype="fp8_e4m3", kv_cache_dtype="fp8", attention_backend="fa3"), simulated_node("H100"), FI)
    assert not viols(a, "dtype.query", "prefill", "fa3") and not viols(a, "fa3.dtype", "prefill", "fa3")


@pytest.mark.parametrize("dev,major", [("B200", "10"), ("A100", "8"), ("RTX PRO 6000", "12")])
def test_fa3_arch_off_hopper(dev, major):
    a = run(cfg(attention_backend="fa3"), simulated_node(dev))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "fa3.arch", phase, "fa3")
        assert obs(v).startswith(major)
        assert "9" in v.required


def test_fa3_arch_fa3_mla_off_hopper():
    a = run(mla(attention_backend="fa3"), simulated_node("A100"))
    assert a.status == "rejected"
    assert the_violation(a, "fa3.arch", "prefill", "fa3")
    assert the_violation(a, "fa3.arch", "decode", "fa3-mla")


def test_fa3_dtype_same_dtype_passes():
    a = run(cfg(kv_cache_dtype="auto", attention_backend="fa3"), simulated_node("H100"))
    assert a.ok
    assert_passes(a, "fa3.dtype", "prefill", "fa3")


@pytest.mark.parametrize("kv,seen", [("fp8", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2"), ("fp16", "fp16")])
def test_fa3_dtype_mixed_precision_rejected_when_forced(kv, seen):
    # the kernel layer: the query stays bf16 (vLLM quantizes it for fp8 KV: test_engine_layers.py)
    a = run(cfg(dtype="bf16", kv_cache_dtype=kv, attention_backend="fa3"), simulated_node("H100"), FI)
    assert a.status == "rejected"
    v = the_violation(a, "fa3.dtype", "prefill", "fa3")
    assert obs(v) == seen
    assert "phase.query_dtype" in v.required


def test_fa3_dtype_auto_falls_back_to_fa2_with_note():
    # vLLM 0.33 quantizes the prefill query to fp8 over an fp8 cache on 9.0, so fa3 runs (issue 21);
    # the kernel layer keeps a bf16 query, which fa3 refuses over fp8 KV
    a = run(cfg(kv_cache_dtype="fp8"), simulated_node("H100"))
    assert a.ok and a.backends() == ("fa3", "xqa") and a.plan.prefill.query_dtype == "float8_e4m3fn"
    k = run(cfg(kv_cache_dtype="fp8"), simulated_node("H100"), FI)
    assert k.backends() == ("fa2", "fa2")
    assert any("fa3.dtype" in n and n.startswith("prefill") for n in k.notes), k.notes


# -- trtllm.family -----------------------------------------------------------------------
@pytest.mark.parametrize("dev", ["B200", "GB200", "B300", "GB300"])
def test_trtllm_family_10x_passes(dev):
    a = run(cfg(attention_backend=TRT), simulated_node(dev))
    assert a.ok, a.violations
    assert_passes(a, "trtllm.family", "prefill", TRT)
    assert_passes(a, "trtllm.family", "decode", TRT)


def test_trtllm_family_includes_10_7():
    # family 10.x is major == 10, not a list of known devices
    a = run(cfg(attention_backend=TRT), simulated_node(capability="10.7"))
    assert a.ok, a.violations


@pytest.mark.parametrize("dev,cap", [("RTX PRO 6000", "12.0"), ("DGX Spark", "12.1"), ("H100", "9.0"),
                                     ("Jetson Thor", "11.0"), ("A100", "8.0")])
def test_trtllm_family_other_families_rejected(dev, cap):
    a = run(cfg(attention_backend=TRT), simulated_node(dev))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "trtllm.family", phase, TRT)
        assert obs(v).startswith(cap.split(".")[0])
        assert "10" in v.required


# -- trtllm.cubins -----------------------------------------------------------------------
def test_trtllm_cubins_missing_rejected_when_forced():
    a = run(cfg(attention_backend=TRT), cubins_missing())
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "trtllm.cubins", phase, TRT)
        for fact in ("cubin_dir_has_cubins", "flashinfer_cubin_version", "artifactory_reachable"):
            assert fact in v.required
        assert v.observed not in (None, "")


def test_trtllm_cubins_simulated_missing():
    a = run(cfg(attention_backend=TRT), simulated_node("B200", cubins="missing"))
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.cubins", "decode", TRT)


def test_trtllm_cubins_missing_auto_falls_back_with_note():
    a = run(cfg(), cubins_missing())
    assert a.ok and a.backends() == ("fa2", "fa2")
    assert any("trtllm.cubins" in n for n in a.notes)


def test_trtllm_cubins_from_cubin_dir(tmp_path):
    node = cubins_missing().with_fact(cubin_dir=Fact.measured(str(tmp_path)),
                                      cubin_dir_has_cubins=Fact.measured(True))
    a = run(cfg(attention_backend=TRT), node, FI)
    assert a.ok, a.violations
    assert_passes(a, "trtllm.cubins", "prefill", TRT)
    # vLLM 0.33's own gate (has_nvidia_artifactory) does not look at the cubin directory
    v = run(cfg(attention_backend=TRT), node)
    assert v.status == "rejected"
    assert the_violation(v, "vllm.trtllm-gate", "decode", TRT).layer == "engine"
    assert_passes(v, "trtllm.cubins", "prefill", TRT)


def test_trtllm_cubins_dir_without_cubins_is_not_enough(tmp_path):
    node = cubins_missing().with_fact(cubin_dir=Fact.measured(str(tmp_path)),
                                      cubin_dir_has_cubins=Fact.measured(False))
    a = run(cfg(attention_backend=TRT), node)
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.cubins", "prefill", TRT)


@pytest.mark.parametrize("fi", ["0.7.2.post1", "0.6.7.post2"])
def test_trtllm_cubins_from_wheel_at_exact_version(fi):
    node = cubins_missing(flashinfer_version=fi).with_fact(flashinfer_cubin_version=Fact.measured(fi))
    a = run(cfg(attention_backend=TRT), node)
    assert a.ok, a.violations
    assert_passes(a, "trtllm.cubins", "decode", TRT)


@pytest.mark.parametrize("fi,cubin", [("0.7.2.post1", "0.7.2"), ("0.7.2.post1", "0.6.7.post2"), ("0.6.7.post2", "0.7.2.post1")])
def test_trtllm_cubins_from_wheel_version_mismatch(fi, cubin):
    node = cubins_missing(flashinfer_version=fi).with_fact(flashinfer_cubin_version=Fact.measured(cubin))
    a = run(cfg(attention_backend=TRT), node)
    assert a.status == "rejected"
    v = the_violation(a, "trtllm.cubins", "decode", TRT)
    assert cubin in obs(v)


def test_trtllm_cubins_from_artifactory():
    node = cubins_missing().with_fact(artifactory_reachable=Fact.measured(True, "HTTP 200"))
    a = run(cfg(attention_backend=TRT), node)
    assert a.ok, a.violations
    assert_passes(a, "trtllm.cubins", "prefill", TRT)


def test_trtllm_cubins_artifactory_unknown_fails_closed():
    node = cubins_missing().with_fact(artifactory_reachable=Fact.unknown("not checked"))
    a = run(cfg(attention_backend=TRT), node)
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.cubins", "prefill", TRT)


def test_trtllm_cubins_nothing_installed_is_not_a_version_match():
    node = cubins_missing().with_fact(flashinfer_version=Fact.measured(None, "flashinfer not installed"),
                                      flashinfer_cubin_version=Fact.measured(None, "flashinfer-cubin not installed"))
    a = run(cfg(attention_backend=TRT), node)
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.cubins", "prefill", TRT)


def test_trtllm_cubins_apply_to_mla_backends():
    a = run(mla(attention_backend=TRT), cubins_missing())
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.cubins", "prefill", "trtllm-ragged")
    assert the_violation(a, "trtllm.cubins", "decode", "trtllm-gen-mla")


# -- trtllm.batch-invariant --------------------------------------------------------------
def test_batch_invariant_off_passes():
    a = run(cfg(batch_invariant=False, attention_backend=TRT), simulated_node("B200"))
    assert a.ok
    assert_passes(a, "trtllm.batch-invariant", "prefill", TRT)


def test_batch_invariant_config_field_disables_trtllm():
    a = run(cfg(batch_invariant=True, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "trtllm.batch-invariant", phase, TRT)
        assert obs(v) == "true"
        assert "false" in v.required


def test_batch_invariant_auto_falls_back_to_fa2():
    a = run(cfg(batch_invariant=True), simulated_node("B200"), FI)
    assert a.ok and a.backends() == ("fa2", "fa2")
    assert any("trtllm.batch-invariant" in n for n in a.notes)
    # a fixed KV split is what makes fa2 batch-invariant (FlashInfer's fixed_split_size)
    assert a.plan.attention.split_kv == "fixed" and a.plan.attention.fixed_split_size
    assert a.plan.decode.use_tensor_cores is True


@pytest.mark.parametrize("dev", ["B200", "H100", "A100"])
def test_batch_invariant_vllm_has_no_flashinfer_plan(dev):
    a = run(cfg(batch_invariant=True), simulated_node(dev))
    assert a.status == "rejected"
    v = the_violation(a, "vllm.batch-invariant", "both", None)
    assert v.layer == "engine" and obs(v) == "true"
    assert ("batch_invariant", False) in {(s.field, s.value) for s in a.suggestions}


def test_batch_invariant_env_fact_via_node():
    node = simulated_node("B200").with_fact(batch_invariant_env=Fact.measured(True, "VLLM_BATCH_INVARIANT='1'"))
    a = run(cfg(attention_backend=TRT), node)          # config leaves batch_invariant unset
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.batch-invariant", "decode", TRT)
    b = run(cfg(), simulated_node("B200", batch_invariant=True), FI)
    assert b.ok and b.backends() == ("fa2", "fa2")


def test_batch_invariant_explicit_false_wins_over_env():
    node = simulated_node("B200", batch_invariant=True)
    a = run(cfg(batch_invariant=False), node)
    assert a.ok and a.backends() == (TRT, TRT)


def test_batch_invariant_env_off_passes():
    node = simulated_node("B200").with_fact(batch_invariant_env=Fact.measured(False, "unset"))
    a = run(cfg(), node)
    assert a.backends() == (TRT, TRT)


def test_batch_invariant_disables_trtllm_mla():
    a = run(mla(batch_invariant=True, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.batch-invariant", "decode", "trtllm-gen-mla")


# -- trtllm.sm103-hang -------------------------------------------------------------------
@pytest.mark.parametrize("fi", ["0.6.7", "0.6.7.post1"])
@pytest.mark.parametrize("dev", ["B300", "GB300"])
def test_sm103_hang_bad_versions(dev, fi):
    a = run(cfg(attention_backend=TRT), simulated_node(dev, flashinfer_version=fi))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "trtllm.sm103-hang", phase, TRT)
        assert obs(v) == fi
        assert "0.6.7" in v.required


@pytest.mark.parametrize("fi", ["0.6.7.post2", "0.7.2.post1", "0.6.6"])
def test_sm103_hang_good_versions(fi):
    a = run(cfg(attention_backend=TRT), simulated_node("B300", flashinfer_version=fi))
    assert a.ok, a.violations
    assert not viols(a, "trtllm.sm103-hang")
    # the rule carries its flashinfer range: it speaks for releases before the fix only
    evaluated = verdicts(a, "trtllm.sm103-hang", "prefill", TRT)
    assert evaluated == ({"pass"} if fi == "0.6.6" else set())


def test_sm103_hang_local_version_label_is_the_same_release():
    a = run(cfg(attention_backend=TRT), simulated_node("B300", flashinfer_version="0.6.7+cu128"))
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.sm103-hang", "decode", TRT)


@pytest.mark.parametrize("fi", ["0.6.7", "0.6.7.post1"])
def test_sm103_hang_10_0_unaffected(fi):
    a = run(cfg(attention_backend=TRT), simulated_node("B200", flashinfer_version=fi))
    assert a.ok, a.violations
    assert not viols(a, "trtllm.sm103-hang")
    assert verdicts(a, "trtllm.sm103-hang", "prefill", TRT) <= {"skip", "pass"}


def test_sm103_hang_unknown_version_on_10_3_fails_closed():
    node = simulated_node("B300").with_fact(flashinfer_version=Fact.unknown("could not read"))
    a = run(cfg(attention_backend=TRT), node)
    assert a.status == "rejected"
    assert the_violation(a, "trtllm.sm103-hang", "prefill", TRT)


def test_sm103_hang_rule_records_fix_version():
    rule = policy.default_ruleset().rule("trtllm.sm103-hang")
    assert rule.fixed_in == "0.6.7.post2"


# -- trtllm.kv-dtype ---------------------------------------------------------------------
@pytest.mark.parametrize("kv", ["auto", "fp16", "bf16", "fp8", "fp8_e4m3", "nvfp4"])
def test_trtllm_kv_dtype_accepts(kv):
    # a 16-bit cache in the model's own dtype: the table has no bf16-query kernel over an fp16 cache
    dtype = "fp16" if kv == "fp16" else "bf16"
    a = run(cfg(dtype=dtype, kv_cache_dtype=kv, attention_backend=TRT), simulated_node("B200"))
    assert a.ok, a.violations
    assert_passes(a, "trtllm.kv-dtype", "decode", TRT)


def test_trtllm_kv_dtype_rejects_e5m2():
    a = run(cfg(kv_cache_dtype="fp8_e5m2", attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "trtllm.kv-dtype", phase, TRT)
        assert obs(v) == "fp8_e5m2"
        assert "nvfp4" in v.required and "fp8_e5m2" not in v.required


def test_trtllm_kv_dtype_e5m2_auto_runs_native():
    a = run(cfg(kv_cache_dtype="fp8_e5m2"), simulated_node("B200"), FI)
    assert a.ok and a.backends() == ("fa2", "fa2")
    assert any("trtllm.kv-dtype" in n for n in a.notes)
    # vLLM 0.33 quantizes the query to e5m2 and fa2 refuses an fp8 query (issue 21)
    v = run(cfg(kv_cache_dtype="fp8_e5m2"), simulated_node("B200"))
    assert v.status == "rejected" and viols(v, "dtype.query", "prefill", "fa2")


# -- trtllm.softcap ----------------------------------------------------------------------
def test_trtllm_softcap_none_passes():
    a = run(cfg(attention_backend=TRT), simulated_node("B200"))
    assert_passes(a, "trtllm.softcap", "prefill", TRT)


def test_trtllm_softcap_rejected():
    a = run(cfg(logits_soft_cap=50.0, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "trtllm.softcap", phase, TRT)
        assert obs(v) == "50.0"


def test_trtllm_softcap_auto_runs_native():
    a = run(cfg(logits_soft_cap=30.0), simulated_node("B300"), FI)
    assert a.ok and a.backends() == ("fa2", "fa2")
    # vLLM 0.33 runs trtllm-gen anyway and drops the soft cap: a rejection (issue 21)
    assert viols(run(cfg(logits_soft_cap=30.0), simulated_node("B300")), "vllm.softcap-dropped")


# -- kv.dtype ----------------------------------------------------------------------------
@pytest.mark.parametrize("kv", ["auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"])
def test_kv_dtype_native_accepts(kv):
    a = run(cfg(kv_cache_dtype=kv), simulated_node("A100"))
    assert a.ok, a.violations
    assert_passes(a, "kv.dtype", "prefill", "fa2")


def test_kv_query_dtype_refuses_a_16_bit_cache_in_the_other_16_bit_type():
    """kv.query-dtype (issue 22, measured on the H100): fp16 KV under a bf16 model fails at plan
    or computes wrong on every native backend and XQA misreads it."""
    a = run(cfg(kv_cache_dtype="fp16"), simulated_node("A100"))
    assert not a.ok
    assert {v.rule for v in a.violations} == {"kv.query-dtype"}
    b = run(cfg(dtype="fp16", kv_cache_dtype="fp16"), simulated_node("A100"))
    assert b.ok, b.violations


def test_kv_dtype_fa2_reads_nvfp4_kernel_truth():
    """v2: fa2 reads NVFP4 (kv_cache_sf=), measured on the H100; vLLM on 10.x reads it with trtllm-gen only."""
    k = run(cfg(kv_cache_dtype="nvfp4", attention_backend="fa2"), simulated_node("B200"), FI)
    assert k.ok, k.violations
    assert_passes(k, "kv.dtype", "prefill", "fa2")
    a = run(cfg(kv_cache_dtype="nvfp4", attention_backend="fa2"), simulated_node("B200"))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        v = the_violation(a, "vllm.nvfp4", phase, "fa2")
        assert obs(v) == "fa2" and "trtllm-gen" in v.required
    # XQA over fp8_e5m2 builds and runs, computing garbage (measured): refused by xqa.e5m2 as wrong output
    e5 = run(cfg(kv_cache_dtype="fp8_e5m2", attention_backend="xqa"), simulated_node("H100"), FI)
    assert the_violation(e5, "xqa.e5m2", "decode", "xqa")
    assert not any(v.rule == "kv.dtype" for v in e5.violations)
    vllm = run(cfg(kv_cache_dtype="fp8_e5m2", attention_backend="flashinfer"), simulated_node("H100"))
    assert vllm.verdict.outcome == "wrong-output" and "xqa.e5m2" in vllm.verdict.rules


def test_kv_dtype_fa3_rejects_nvfp4():
    a = run(cfg(kv_cache_dtype="nvfp4", dtype="fp16", attention_backend="fa3"), simulated_node("H100"))
    assert a.status == "rejected"
    assert the_violation(a, "kv.dtype", "prefill", "fa3")


# -- kv.nvfp4-sm100f ---------------------------------------------------------------------
@pytest.mark.parametrize("dev", ["B200", "GB200", "B300", "GB300"])
def test_nvfp4_on_sm100f_runs_trtllm_both_phases(dev):
    a = run(cfg(kv_cache_dtype="nvfp4"), simulated_node(dev))
    assert a.ok, a.violations
    assert a.backends() == (TRT, TRT)
    assert verdicts(a, "vllm.nvfp4", "both", None) == {"pass"}
    assert_passes(a, "kv.nvfp4-sm100f", "prefill", TRT)


@pytest.mark.parametrize("dev,decode", [("RTX PRO 6000", "xqa"), ("RTX 5090", "xqa"), ("DGX Spark", "xqa"),
                                        ("H100", "fa2"), ("A100", "fa2")])
def test_nvfp4_off_sm100f_runs_fa2_under_vllm_033(dev, decode):
    """v2 (seed 003 revisited): vLLM 0.33 serves NVFP4 via fa2 on 8.x/9.x/12.x; XQA reads it on 12.x only."""
    a = run(cfg(kv_cache_dtype="nvfp4"), simulated_node(dev))
    assert a.ok, a.violations
    assert a.backends() == ("fa2", decode)
    assert a.plan.prefill.query_dtype == "bfloat16"          # fa2 keeps the 16-bit query (kv_cache_sf)
    assert a.plan.attention.split_kv == ("disabled" if dev in ("RTX PRO 6000", "RTX 5090", "DGX Spark") else "auto")


@pytest.mark.parametrize("dev,cap", [("RTX PRO 6000", "12.0"), ("H100", "9.0"), ("A100", "8.0")])
def test_nvfp4_at_head_64_is_a_violation_by_itself(dev, cap):
    a = run(cfg(kv_cache_dtype="nvfp4", head_dim=64), simulated_node(dev))
    assert a.status == "rejected"
    v = the_violation(a, "vllm.nvfp4", "both", None)
    assert v.observed["config.head_dim"] == 64 and v.observed["node.capability_major"] == int(cap.split(".")[0])
    assert v.layer == "engine"


def test_nvfp4_on_10_7_is_not_sm100f():
    a = run(cfg(kv_cache_dtype="nvfp4"), simulated_node(capability="10.7"))
    assert a.status == "rejected"
    v = the_violation(a, "kv.nvfp4-sm100f", "prefill", TRT)
    assert obs(v) == "10.7"
    assert run(cfg(kv_cache_dtype="nvfp4"), simulated_node(capability="10.7"), FI).backends() == ("fa2", "fa2")


def test_nvfp4_on_sm100f_needs_trtllm_in_both_phases():
    # 10.3 with the hanging flashinfer: trtllm-gen is out; vLLM reads nvfp4 on 10.x with trtllm-gen only.
    a = run(cfg(kv_cache_dtype="nvfp4"), simulated_node("B300", flashinfer_version="0.6.7"))
    assert a.status == "rejected"
    assert not viols(a, "vllm.nvfp4", "both")
    for phase in ("prefill", "decode"):
        v = the_violation(a, "vllm.nvfp4", phase, "fa2")
        assert obs(v) == "fa2"
        assert TRT in v.required


@pytest.mark.parametrize("dev", ["B200", "GB300"])
def test_nvfp4_on_sm100f_without_cubins_rejected(dev):
    a = run(cfg(kv_cache_dtype="nvfp4"), cubins_missing(dev))
    assert a.status == "rejected"
    assert not viols(a, "vllm.nvfp4", "both")
    assert the_violation(a, "trtllm.cubins", "prefill", TRT)
    for phase in ("prefill", "decode"):
        assert the_violation(a, "vllm.nvfp4", phase, "fa2")


def test_nvfp4_forced_fa2_on_b200_rejected():
    a = run(cfg(kv_cache_dtype="nvfp4", attention_backend="fa2"), simulated_node("B200"))
    assert a.status == "rejected"
    assert the_violation(a, "vllm.nvfp4", "decode", "fa2")


# -- sinks -------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", ["B200", "B300"])
def test_sinks_on_10x_runs_trtllm(dev):
    a = run(cfg(sinks=True), simulated_node(dev))
    assert a.ok and a.backends() == (TRT, TRT)
    assert verdicts(a, "vllm.sinks", "both", None) == {"pass"}
    assert_passes(a, "vllm.sinks", "prefill", TRT)


@pytest.mark.parametrize("dev,expected", [("H100", ("fa3", "xqa")), ("RTX PRO 6000", ("fa2", "xqa"))])
def test_sinks_on_9_0_and_12x_decode_on_xqa(dev, expected):
    """v2: vLLM 0.33 serves sinks on 9.0/12.x with XQA decode; prefill runs FlashInfer's sink wrapper."""
    a = run(cfg(sinks=True, sliding_window=128), simulated_node(dev))
    assert a.ok, a.violations
    assert a.backends() == expected
    assert a.plan.prefill.call == "sink"
    assert a.plan.prefill.entry_point == "flashinfer.BatchAttentionWithAttentionSinkWrapper"
    assert a.plan.decode.call == "xqa_decode" and a.plan.decode.returns_lse is False
    assert a.plan.attention.sinks and a.plan.attention.window_left == 127


def test_sinks_off_9_0_10x_12x_is_an_engine_violation_by_itself():
    a = run(cfg(sinks=True), simulated_node("A100"))
    assert a.status == "rejected"
    v = the_violation(a, "vllm.sinks", "both", None)
    assert obs(v, "node.capability") == "80" and v.layer == "engine"
    k = run(cfg(sinks=True), simulated_node("A100"), FI)       # FlashInfer's sink wrapper runs it on fa2
    assert k.ok and k.backends() == ("fa2", "fa2") and k.plan.decode.call == "sink"


def test_sinks_on_10x_without_trtllm_rejected():
    a = run(cfg(sinks=True), cubins_missing())
    assert a.status == "rejected"
    assert not viols(a, "vllm.sinks", "both")
    for phase in ("prefill", "decode"):
        v = the_violation(a, "vllm.sinks", phase, "fa2")
        assert obs(v) == "fa2"
        assert TRT in v.required


def test_sinks_forced_fa2_rejected():
    a = run(cfg(sinks=True, attention_backend="fa2"), simulated_node("B200"))
    assert a.status == "rejected"
    assert the_violation(a, "vllm.sinks", "prefill", "fa2")
    k = run(cfg(sinks=True, attention_backend="fa2"), simulated_node("B200"), FI)
    assert k.ok and k.plan.prefill.call == k.plan.decode.call == "sink"


def test_sinks_never_on_mla_or_over_nvfp4_in_the_sink_wrapper():
    a = run(cfg(sinks=True, kv_cache_dtype="nvfp4", attention_backend="fa2"), simulated_node("H100"), FI)
    assert the_violation(a, "sinks", "prefill", "fa2")
    m = run(mla(sinks=True), simulated_node("B200"))
    assert m.status == "rejected" and viols(m, "sinks")


def test_sinks_off_passes_native():
    a = run(cfg(sinks=False), simulated_node("H100"))
    assert a.ok
    assert verdicts(a, "sinks") <= {"skip", "pass"}


# -- mla.* -------------------------------------------------------------------------------
@pytest.mark.parametrize("dev,expected", [
    ("B200", ("trtllm-ragged", "trtllm-gen-mla")), ("B300", ("trtllm-ragged", "trtllm-gen-mla")),
    ("H100", ("fa3", "fa3-mla")), ("A100", ("fa2", "fa2-mla")), ("RTX PRO 6000", ("fa2", "fa2-mla")),
])
def test_mla_selection(dev, expected):
    # vLLM 0.33 serves FlashInfer MLA on 10.x only (FLASHINFER_MLA; issue 21): elsewhere the kernel layer
    vllm_serves = dev.startswith("B")
    if not vllm_serves:
        assert viols(run(mla(), simulated_node(dev)), "vllm.mla-backend")
    a = run(mla(), simulated_node(dev), None if vllm_serves else FI)
    assert a.ok, a.violations
    assert a.backends() == expected
    assert a.plan.kv_cache.mla


def test_mla_trtllm_page_size_unset_is_32():
    a = run(mla(), simulated_node("B200"))
    assert a.plan.kv_cache.page_size == 32


def test_mla_native_page_size_unset_is_16():
    a = run(mla(), simulated_node("A100"), FI)
    assert a.plan.kv_cache.page_size == 16


def test_mla_family_off_10x():
    a = run(mla(attention_backend=TRT), simulated_node("H100"))
    assert a.status == "rejected"
    v = the_violation(a, "mla.family", "prefill", "trtllm-ragged")
    assert obs(v).startswith("9")
    assert the_violation(a, "mla.family", "decode", "trtllm-gen-mla")


def test_mla_dims_kv_lora_rank():
    # Native MLA decode runs kv_lora_rank 128, 256 and 512 (128 and 256 measured on the H100 by
    # attnplan verify); other ranks are refused
    assert run(mla(kv_lora_rank=256), simulated_node("A100"), FI).ok
    assert run(mla(kv_lora_rank=128), simulated_node("A100"), FI).ok
    a = run(mla(kv_lora_rank=384), simulated_node("A100"), FI)
    assert a.status == "rejected"
    v = the_violation(a, "mla.dims", "decode", "fa2-mla")
    assert obs(v) == "384"
    assert "256" in v.required and "512" in v.required
    # (256, 64) at 128 heads: the table lacks the 2-CTA kernel some serving shapes need (kernel table 158f6fa1):
    # vLLM's FLASHINFER_MLA, which decodes on trtllm-gen-mla, fails there; FlashInfer alone decodes on fa2-mla
    b = run(mla(kv_lora_rank=256, page_size=32), simulated_node("B200"))   # page 16: 0.6.18+'s wrapper refuses it first
    v = the_violation(b, "trtllm.kernel-missing", "decode", "trtllm-gen-mla")
    assert not b.ok and "uses2CtaMma=1" in v.message and b.verdict.outcome != "runs"
    c = run(mla(kv_lora_rank=256), simulated_node("B200"), FI)
    assert c.ok and c.backends() == ("fa2", "fa2-mla")
    assert c.plan.prefill.modules[-1].params["kernel"] == "merge_state"


def test_mla_ragged_prefill_on_native_backends_refuses_sinks():
    # attnplan verify (H100) found fa2's ragged MLA prefill accepting sinks and ignoring them
    a = run(mla(sinks=True, attention_backend="fa2"), simulated_node("A100"))
    assert a.status == "rejected"
    v = [x for x in a.violations if x.rule == "sinks" and x.phase == "prefill" and x.backend == "fa2"]
    assert v and "ragged prefill" in v[0].message


def test_mla_trtllm_decode_nope_dims():
    # trtllm-gen MLA decode's NoPE layout (512, 0) (flashinfer/mla/_core.py nope_mla_dimensions)
    b = run(mla(qk_rope_head_dim=0, attention_backend="trtllm-gen-mla"), simulated_node("B200"))
    dims = {e.verdict for e in b.trace if e.rule == "mla.dims" and e.backend == "trtllm-gen-mla"}
    assert dims == {"pass"}
    c = run(mla(qk_rope_head_dim=32, attention_backend="trtllm-gen-mla"), simulated_node("B200"))
    assert c.status == "rejected" and the_violation(c, "mla.dims", "decode", "trtllm-gen-mla")


def test_mla_trtllm_decode_refuses_64_to_128_heads():
    a = run(mla(num_qo_heads=96, attention_backend=TRT), simulated_node("B200"))
    assert the_violation(a, "mla.heads", "decode", "trtllm-gen-mla").observed == "96"


def test_mla_dims_rope():
    a = run(mla(qk_nope_head_dim=160, qk_rope_head_dim=32), simulated_node("A100"))
    assert a.status == "rejected"
    v = the_violation(a, "mla.dims", "decode", "fa2-mla")
    assert obs(v) == "32"
    assert "64" in v.required


@pytest.mark.parametrize("page", [32, 64])
def test_mla_page_size_trtllm_accepts(page):
    a = run(mla(page_size=page, attention_backend=TRT), simulated_node("B200"))
    assert a.ok
    assert_passes(a, "mla.page-size", "decode", "trtllm-gen-mla")


@pytest.mark.parametrize("page", [16, 128])
def test_mla_page_size_trtllm_rejects(page):
    # the kernel layer: pages of 32/64 only (vLLM runs a block of 128 on kernel pages of 64)
    if page == 128:
        assert run(mla(page_size=page, attention_backend=TRT), simulated_node("B200")).plan.kv_cache.page_size == 64
    a = run(mla(page_size=page, attention_backend=TRT), simulated_node("B200"), FI)
    assert a.status == "rejected"
    v = the_violation(a, "mla.page-size", "decode", "trtllm-gen-mla")
    assert obs(v) == str(page)
    assert "32" in v.required and "64" in v.required


def test_mla_page_size_native_takes_128():
    # measured on the H100 (attnplan verify): the native MLA wrapper reads pages of 128
    a = run(mla(page_size=128), simulated_node("A100"), FI)
    assert a.ok and a.plan.kv_cache.page_size == 128 and a.plan.decode.backend == "fa2-mla"


def test_mla_page_size_16_trtllm_ragged_not_chosen():
    # SPEC §3 mla.*: trtllm-ragged needs page 32/64 like trtllm-gen-mla (it reads the same cache),
    # so page 16 on 10.x falls back to native MLA in both phases.
    a = run(mla(page_size=16), simulated_node("B200"), FI)
    assert a.ok
    assert a.backends() == ("fa2", "fa2-mla")
    # vLLM's FLASHINFER_MLA takes blocks of 32/64 (and their multiples) only, and never decodes natively
    assert run(mla(page_size=16), simulated_node("B200")).status == "rejected"
    assert a.plan.kv_cache.layout == "NHD"
    forced = run(mla(page_size=16, attention_backend=TRT), simulated_node("B200"))
    v = the_violation(forced, "mla.page-size", "prefill", "trtllm-ragged")
    assert obs(v) == "16"


def test_mla_trtllm_ragged_needs_kv_lora_rank_512_and_rope_64():
    a = run(mla(kv_lora_rank=256, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    v = the_violation(a, "mla.dims", "prefill", "trtllm-ragged")
    assert obs(v) == "256"


@pytest.mark.parametrize("kv", ["auto", "bf16", "fp16", "fp8"])
def test_mla_kv_dtype_trtllm_accepts(kv):
    # a 16-bit cache in the model's own dtype (the table's MLA kernels: bf16/bf16/bf16 and fp8/fp8/bf16)
    a = run(mla(kv_cache_dtype=kv), simulated_node("B200"))
    if kv == "fp16":  # a bf16 model over an fp16 latent cache: no trtllm-gen MLA kernel reads it
        assert not a.ok and "trtllm.kernel-missing" in {v.rule for v in a.violations}
        return
    assert a.ok and a.backends() == ("trtllm-ragged", "trtllm-gen-mla")


@pytest.mark.parametrize("kv", ["fp8_e5m2", "nvfp4"])
def test_mla_kv_dtype_trtllm_rejects(kv):
    a = run(mla(kv_cache_dtype=kv, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    for phase, backend in (("decode", "trtllm-gen-mla"), ("prefill", "trtllm-ragged")):
        v = the_violation(a, "mla.kv-dtype", phase, backend)
        assert obs(v) == kv
        assert "fp8_e4m3" in v.required


@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
def test_mla_kv_dtype_native_16bit_only(kv):
    a = run(mla(kv_cache_dtype=kv), simulated_node("A100"))
    assert a.status == "rejected"
    v = the_violation(a, "mla.kv-dtype", "decode", "fa2-mla")
    assert obs(v).startswith("fp8")
    assert "bf16" in v.required


@pytest.mark.parametrize("nope,rope,v", [(128, 64, 128), (192, 64, 256)])
def test_mla_ragged_dims_accepted(nope, rope, v):
    a = run(mla(qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v), simulated_node("B200"))
    assert a.ok, a.violations
    assert a.plan.prefill.backend == "trtllm-ragged"
    assert_passes(a, "mla.ragged-dims", "prefill", "trtllm-ragged")


def test_mla_ragged_dims_rejected_when_forced():
    a = run(mla(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=64, attention_backend=TRT), simulated_node("B200"))
    assert a.status == "rejected"
    v = the_violation(a, "mla.ragged-dims", "prefill", "trtllm-ragged")
    assert "64" in obs(v)


def test_mla_prefill_dims_native():
    ok = run(mla(), simulated_node("A100"), FI)
    assert_passes(ok, "mla.prefill-dims", "prefill", "fa2")
    # (128, 128) measured on the H100 (attnplan verify), (192, 128) is DeepSeek's
    assert run(mla(qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=128), simulated_node("A100"), FI).ok
    # (256, 128) on fa2 measured too; vo 256 is refused
    assert run(mla(qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=128), simulated_node("A100"), FI).ok
    a = run(mla(qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256), simulated_node("A100"), FI)
    assert a.status == "rejected"
    v = the_violation(a, "mla.prefill-dims", "prefill", "fa2")
    assert "256" in obs(v)
    assert "192" in v.required and "128" in v.required


def test_mla_falls_back_to_native_on_10x_when_trtllm_is_out():
    # batch-invariant mode rules out trtllm-ragged and trtllm-gen-mla; DeepSeek's (192, 128)
    # prefill and 512/64 latent cache run natively (SPEC §4: first candidate with no violation).
    a = run(mla(), simulated_node("B200", batch_invariant=True), FI)
    assert a.ok, a.violations
    assert a.backends() == ("fa2", "fa2-mla")
    assert a.plan.kv_cache.layout == "NHD"
    assert any("trtllm.batch-invariant" in n for n in a.notes)


def test_mla_backend_rejects_mla_kernels_for_standard_models():
    a = run(cfg(attention_backend="fa2-mla"), simulated_node("A100"))
    assert a.status == "rejected"
    v = the_violation(a, "mla.backend", "decode", "fa2-mla")
    assert obs(v) == "false"


def test_mla_native_needs_sm80():
    a = run(mla(), simulated_node("T4"))
    assert a.status == "rejected"
    assert the_violation(a, "device.capability", "prefill", "fa2")
    assert the_violation(a, "device.capability", "decode", "fa2-mla")


def test_mla_fa3_mla_on_hopper():
    # native MLA on 9.x with a 16-bit cache runs fa3 / fa3-mla; fa3-mla needs 9.x (fa3.arch)
    a = run(mla(), simulated_node("H100"), FI)
    assert_passes(a, "fa3.arch", "decode", "fa3-mla")
    assert_passes(a, "mla.kv-dtype", "decode", "fa3-mla")


# -- rejections list every violation ------------------------------------------------------
def test_rejection_lists_every_violated_rule_not_the_first():
    a = run(cfg(head_dim=96, kv_cache_dtype="nvfp4", page_size=128, attention_backend="fa3"), simulated_node("B200"))
    assert a.status == "rejected"
    for phase in ("prefill", "decode"):
        rules = {v.rule for v in a.violations if v.phase == phase and v.backend == "fa3"}
        assert {"fa3.arch", "head-size", "kv.dtype", "vllm.head-size", "vllm.nvfp4"} <= rules, rules
        if phase == "decode":                             # block 128 runs on kernel pages of 64 (issue 21)
            assert "vllm.page-size" not in rules
        layers = {v.layer for v in a.violations if v.phase == phase}
        assert layers == {"kernel", "engine"}


def test_rejection_lists_every_candidate():
    a = run(cfg(head_dim=96), simulated_node("H100"), FI)
    assert a.status == "rejected"
    assert {(v.phase, v.backend) for v in a.violations if v.rule == "head-size"} == {
        ("prefill", "fa3"), ("prefill", "fa2")}                # decode has xqa, which takes 96


def test_forced_backend_never_falls_back():
    a = run(cfg(attention_backend=TRT), simulated_node("H100"))
    assert a.status == "rejected" and a.plan is None
    assert {v.backend for v in a.violations if v.backend} == {TRT}


# -- suggestions name the rule's way out (SPEC §4), each verified -------------------------
def suggested(answer) -> dict[tuple[str, object], tuple[str, str]]:
    return {(s.field, s.value): (s.prefill, s.decode) for s in answer.suggestions}


def assert_verified(config, node, answer, engine=None):
    for s in answer.suggestions:
        c2, n2 = policy.apply_suggestion(config, node, s)
        again = policy.evaluate(c2, n2, engine=engine)
        assert again.ok and again.backends() == (s.prefill, s.decode), s


def test_evaluate_never_suggests():
    a = policy.evaluate(cfg(kv_cache_dtype="nvfp4"), simulated_node("T4"))
    assert a.status == "rejected" and a.suggestions == ()


def test_suggestion_batch_invariant_off_from_config():
    config, node = cfg(batch_invariant=True, attention_backend=TRT), simulated_node("B200")
    a = run(config, node, FI)
    got = suggested(a)
    assert got[("batch_invariant", False)] == (TRT, TRT)
    assert got[("attention_backend", "auto")] == ("fa2", "fa2")
    assert_verified(config, node, a, FI)


def test_suggestion_batch_invariant_off_from_env():
    # sinks need trtllm-gen; VLLM_BATCH_INVARIANT=1 on the node rules it out
    config, node = cfg(sinks=True), simulated_node("B200", batch_invariant=True)
    a = run(config, node)
    assert a.status == "rejected"
    assert suggested(a)[("batch_invariant", False)] == (TRT, TRT)
    assert_verified(config, node, a)


def test_suggestion_page_size_for_forced_native():
    config, node = cfg(page_size=8, attention_backend="fa2"), simulated_node("B200")   # no kernel page divides 8
    a = run(config, node)
    got = suggested(a)
    for page in (16, 32, 64):
        assert got[("page_size", page)] == ("fa2", "fa2")
    assert_verified(config, node, a)


def test_suggestion_kv_dtype_for_forced_trtllm_e5m2():
    config, node = cfg(kv_cache_dtype="fp8_e5m2", attention_backend=TRT), simulated_node("B200")
    a = run(config, node)
    kv = {s.value for s in a.suggestions if s.field == "kv_cache_dtype"}
    assert "fp8" in kv  # vLLM's spelling of e4m3: what the suggestion search tries
    assert "fp8_e5m2" not in kv
    assert_verified(config, node, a)


def test_suggestion_install_flashinfer_cubin():
    config, node = cfg(attention_backend=TRT), cubins_missing()
    a = run(config, node)
    s = [s for s in a.suggestions if s.field == "flashinfer_cubin"]
    assert len(s) == 1 and s[0].value == SUPPORTED and s[0].target == "node"
    assert (s[0].prefill, s[0].decode) == (TRT, TRT)
    # the package index stops at flashinfer-cubin 0.6.13: never "pip install flashinfer-cubin==0.7.2.post1"
    assert "pip install flashinfer-cubin==" not in s[0].message
    assert "wheel index" in s[0].message and "FLASHINFER_CUBIN_DIR" in s[0].message
    assert_verified(config, node, a)


def test_no_suggestion_when_nothing_helps():
    a = run(cfg(), simulated_node("T4"))
    assert a.status == "rejected" and a.suggestions == ()


def test_fa3_sink_wrapper_reads_the_phase_query_not_the_model_dtype():
    # vLLM 0.33 quantizes the prefill query to fp8 over an fp8 cache on 9.0 (get_q_data_type), and
    # fa3's sink wrapper does not build for an fp8 query (H100 sweep, sinks rule): a bf16 model with
    # sinks and an fp8 cache is refused under vLLM, and runs under the kernel layer alone.
    c = cfg(head_dim=64, num_qo_heads=8, num_kv_heads=1, kv_cache_dtype="fp8", sinks=True)
    a = run(c, simulated_node("H100"), engine="vllm")
    v = the_violation(a, "sinks", "prefill", "fa3")
    assert v.fact == "phase.query_dtype" and v.observed == "fp8_e4m3"
    ok = run(c, simulated_node("H100"), engine="flashinfer")
    assert not viols(ok, "sinks", "prefill", "fa3")


# -- xqa.spec-sinks (measured: issue 38's exhaustive tiers 3 and 5) ----------------------------------------
@pytest.mark.parametrize("group, spec, kv, sinks, refused", [
    (11, 2, "fp8", True, True), (12, 2, "fp8", True, True),      # measured wrong
    (10, 2, "fp8", True, False), (32, 1, "fp8", True, False),     # measured correct
    (11, 2, "fp8", False, False),                                 # the sink-less twins: correct
    (9, 3, "fp8", True, True),                                    # q_len 4: not reached, refused by the bound
    # 16-bit caches (tier 5): q_len 2 wrong at groups 25-31, right at 1-16 and 32; q_len 3 wrong from group 11
    (25, 1, "auto", True, True), (31, 1, "auto", True, True),    # measured wrong
    (16, 1, "auto", True, False), (32, 1, "auto", True, False),  # measured correct
    (11, 2, "auto", True, True), (10, 2, "auto", True, False),   # measured wrong / correct
    (25, 1, "auto", False, False), (11, 2, "auto", False, False),  # the sink-less twins: correct
    (13, 2, "auto", True, True), (9, 3, "auto", True, True),     # measured wrong (bf16 tier 5 whole)
    (26, 2, "auto", True, True), (31, 3, "auto", True, True),    # measured wrong
    (16, 2, "auto", True, False), (32, 3, "auto", True, False),  # measured correct: groups 16 and 32
    (8, 3, "auto", True, False),                                 # q_len x group = 32: correct
    (16, 2, "fp16", True, False), (32, 2, "fp16", True, False),  # measured correct over fp16 too (q_len 3)
    (13, 2, "fp16", True, True), (25, 1, "fp16", True, True),    # measured wrong over fp16
    (16, 3, "fp16", True, False), (32, 3, "fp16", True, False),  # fp16 q_len 4 at 16 / 32: measured correct
    (10, 3, "fp16", True, True), (25, 3, "fp16", True, True),    # fp16 q_len 4: measured wrong
    (16, 4, "auto", True, True), (9, 5, "auto", True, True),     # q_len 5+: not measured, fail closed
])
def test_xqa_spec_sinks_boundary(group, spec, kv, sinks, refused):
    extra = {"dtype": "fp16", "kv_cache_dtype": "auto"} if kv == "fp16" else {"kv_cache_dtype": kv}
    c = cfg(head_dim=64, num_qo_heads=2 * group, num_kv_heads=2, sinks=sinks, num_speculative_tokens=spec,
            attention_backend="xqa", **extra)
    a = run(c, simulated_node("H100"), FI)
    hit = [v for v in a.violations if v.rule == "xqa.spec-sinks"]
    assert bool(hit) == refused, a.violations
    if refused:
        assert hit[0].phase == "decode" and policy.default_ruleset().rule("xqa.spec-sinks").outcome == "silent-wrong"


# -- kv.nvfp4-head64-wide-tile (measured: issue 38's sample r0023 and its variants, bench/logs/h100-2026-11-26q) --
@pytest.mark.parametrize("head, group, spec, kv, refused", [
    (64, 57, 3, "nvfp4", True), (64, 17, 3, "nvfp4", True), (64, 57, 1, "nvfp4", True),   # measured wrong
    (64, 16, 3, "nvfp4", True), (64, 8, 3, "nvfp4", True),   # measured correct eager; CUDA graphs pack more: refused
    (64, 57, 0, "nvfp4", False),                              # q_len 1 x group 57: measured correct
    (64, 65, 0, "nvfp4", True),                               # more than 64 rows at q_len 1: read, not measured
    (128, 57, 3, "nvfp4", False), (64, 57, 3, "fp8", False),  # head 128, fp8 cache: measured correct
])
def test_nvfp4_head64_wide_tile_boundary(head, group, spec, kv, refused):
    c = cfg(head_dim=head, num_qo_heads=group, num_kv_heads=1, kv_cache_dtype=kv, num_speculative_tokens=spec,
            attention_backend="fa2")
    a = run(c, simulated_node("H100"), FI)
    hit = [v for v in a.violations if v.rule == "kv.nvfp4-head64-wide-tile"]
    assert bool(hit) == refused, a.violations
    if refused:
        assert hit[0].phase == "decode" and policy.default_ruleset().rule("kv.nvfp4-head64-wide-tile").outcome == "silent-wrong"
    # Blackwell is outside the rule (capability 10 reads NVFP4 natively)
    assert not [v for v in run(c, simulated_node("B200"), FI).violations if v.rule == "kv.nvfp4-head64-wide-tile"]

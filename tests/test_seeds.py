"""One scenario per seed (the vLLM PR reports in shared/seeds/), checked against SPEC.md."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from attnplan import policy
from attnplan.policy import (AttentionConfig, Fact, UnsupportedConfigurationError, apply_suggestion, plan_for,
                    require_plan, simulated_node)
from attnplan.policy.rulepack import load_ruleset
from attnplan.render import finish
from attnplan.rules import BACKENDS_FILE, PACKS_DIR

STD = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
TRT = "trtllm-gen"
HANG = {Version("0.6.7"), Version("0.6.7.post1")}


def cfg(**kw) -> AttentionConfig:
    data = dict(STD)
    data.update(kw)
    return AttentionConfig(**data)


def rule_ids(answer) -> set[str]:
    return {v.rule for v in answer.violations}


def check_suggestions_verified(config, node, answer):
    """SPEC §4: each suggestion alone makes the config valid here, with the backends it names."""
    assert answer.suggestions
    for s in answer.suggestions:
        c2, n2 = apply_suggestion(config, node, s)
        again = policy.evaluate(c2, n2)
        assert again.ok, (s, again.violations)
        assert again.backends() == (s.prefill, s.decode), s


# -- seed 000: TRTLLM on the SM10x family; the SM103 hang is a versioned rule ------------
@pytest.mark.parametrize("cap", ["10.0", "10.3"])
def test_seed000_family_10x_accepted_for_trtllm(cap):
    a = plan_for(cfg(attention_backend=TRT), simulated_node(capability=cap))
    assert a.ok, a.violations
    assert a.backends() == (TRT, TRT)
    auto = plan_for(cfg(), simulated_node(capability=cap))
    assert auto.backends() == (TRT, TRT)


@pytest.mark.parametrize("cap", ["12.0", "9.0"])
def test_seed000_other_families_not(cap):
    a = plan_for(cfg(attention_backend=TRT), simulated_node(capability=cap))
    assert a.status == "rejected"
    assert "trtllm.family" in rule_ids(a)
    auto = plan_for(cfg(), simulated_node(capability=cap))
    assert auto.ok and TRT not in auto.backends()


def test_seed000_flashinfer_067_on_10_3_falls_back_with_reason():
    a = finish(plan_for(cfg(), simulated_node("GB300", flashinfer_version="0.6.7")))   # its notes written by render/
    assert a.ok
    assert a.backends() == ("fa2", "fa2")
    for phase in ("prefill", "decode"):
        notes = [n for n in a.notes if n.startswith(phase) and TRT in n]
        assert notes, a.notes
        assert any("trtllm.sm103-hang" in n for n in notes), notes
    assert a.plan.kv_cache.layout == "NHD"


def test_seed000_forcing_trtllm_is_a_rejection_with_verified_version_suggestion():
    config = cfg(attention_backend=TRT)
    node = simulated_node("B300", flashinfer_version="0.6.7")
    a = plan_for(config, node)
    assert a.status == "rejected" and a.plan is None         # never a silent fallback
    assert {(v.rule, v.phase, v.backend) for v in a.violations} == {
        ("trtllm.sm103-hang", "prefill", TRT), ("trtllm.sm103-hang", "decode", TRT)}
    versions = [s for s in a.suggestions if s.field == "flashinfer_version"]
    assert versions, a.suggestions
    for s in versions:
        assert s.target == "node"
        assert Version(str(s.value)) >= Version("0.6.7.post2")
        assert Version(str(s.value)) not in HANG
        assert (s.prefill, s.decode) == (TRT, TRT)
    assert any(Version(str(s.value)) == Version("0.6.7.post2") for s in versions)  # the rule's fixed_in
    check_suggestions_verified(config, node, a)
    with pytest.raises(UnsupportedConfigurationError):
        require_plan(config, node)


@pytest.mark.parametrize("fi", ["0.6.7", "0.6.7.post1"])
def test_seed000_no_suggestion_names_a_hanging_version(fi):
    a = plan_for(cfg(attention_backend=TRT), simulated_node("B300", flashinfer_version=fi))
    for s in a.suggestions:
        if s.field == "flashinfer_version":
            assert Version(str(s.value)) not in HANG


def test_seed000_trtllm_needs_artifactory_or_cubins_and_batch_invariance_off():
    base = simulated_node("B300", cubins="missing")
    assert plan_for(cfg(), base).backends() == ("fa2", "fa2")
    reach = base.with_fact(artifactory_reachable=Fact.measured(True, "HTTP 200"))
    assert plan_for(cfg(), reach).backends() == (TRT, TRT)
    bi = reach.with_fact(batch_invariant_env=Fact.measured(True, "VLLM_BATCH_INVARIANT='1'"))
    # FlashInfer alone: fa2 with a fixed KV split; vLLM 0.33's FlashInfer backends refuse batch invariance
    assert plan_for(cfg(), bi, engine="flashinfer").backends() == ("fa2", "fa2")
    assert rule_ids(plan_for(cfg(), bi)) == {"vllm.batch-invariant"}


def test_seed000_supports_trtllm_attention_means_xqa_decode_on_9_0_and_12x():
    """Since seed 000: vLLM 0.33's supports_trtllm_attention is true for decode on 9.0/12.x (XQA),
    gated on the same artifactory check (flashinfer-cubin or HTTP 200)."""
    for dev in ("H100", "RTX PRO 6000"):
        gated = simulated_node(dev, cubins="missing")
        assert plan_for(cfg(), gated).plan.decode.backend == "fa2"
        ok = gated.with_fact(artifactory_reachable=Fact.measured(True, "HTTP 200"))
        assert plan_for(cfg(), ok).plan.decode.backend == "xqa"
        # XQA itself needs no cubins: the kernel layer decodes with it whatever the artifactory says
        assert plan_for(cfg(attention_backend="xqa"), gated, engine="flashinfer").ok


def test_seed000_lifting_the_bug_is_a_data_change(tmp_path):
    """A fixed upstream bug is a one-line change of rule data, and the revision records it."""
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    text = (packs / "trtllm.yaml").read_text()
    line = 'version: "!=0.6.7, !=0.6.7.post1"'
    assert line in text
    (packs / "trtllm.yaml").write_text(text.replace(line, 'version: "!=0.6.7"'))
    shipped = policy.default_ruleset()
    edited = load_ruleset(sorted(packs.glob("*.yaml")), BACKENDS_FILE)
    assert edited.revision != shipped.revision
    node = simulated_node("B300", flashinfer_version="0.6.7.post1")
    assert policy.evaluate(cfg(), node, shipped).backends() == ("fa2", "fa2")
    assert policy.evaluate(cfg(), node, edited).backends() == (TRT, TRT)
    node0 = simulated_node("B300", flashinfer_version="0.6.7")
    assert policy.evaluate(cfg(), node0, edited).backends() == ("fa2", "fa2")


# -- seed 001: metadata needs per batch kind ---------------------------------------------
def expected_meta(prefill_trt: bool, decode_trt: bool, dcp: int, cascade: bool):
    """SPEC §5 formulas, batch kind -> (all_uses_trtllm, needs_host_seq_lens, needs_paged_kv_indices)."""
    out = {}
    for kind, (has_p, has_d) in {"prefill_only": (True, False), "decode_only": (False, True),
                                 "mixed": (True, True)}.items():
        all_trt = (not has_p or prefill_trt) and (not has_d or decode_trt)
        out[kind] = (all_trt, dcp > 1 or cascade or not all_trt, cascade or not all_trt)
    return out


def meta_tuple(plan):
    m = plan.metadata
    return {k: (getattr(m, k).all_uses_trtllm, getattr(m, k).needs_host_seq_lens, getattr(m, k).needs_paged_kv_indices)
            for k in ("prefill_only", "decode_only", "mixed")}


def assert_indptr(plan):
    m = plan.metadata
    assert m.prefill_only.prefill_kv_indptr == "device_cumsum"
    assert m.mixed.prefill_kv_indptr == "device_cumsum"
    assert m.decode_only.prefill_kv_indptr is None


@pytest.mark.parametrize("dcp,cascade", [(1, False), (2, False), (1, True), (4, True)])
def test_seed001_b200_all_trtllm(dcp, cascade):
    a = require_plan(cfg(dcp_world_size=dcp, cascade=cascade, num_speculative_tokens=3), simulated_node("B200"))
    assert a.backends() == (TRT, TRT)
    got = meta_tuple(a.plan)
    assert got == expected_meta(True, True, dcp, cascade)
    # no dcp and no cascade: a pure-trtllm step needs neither host seq_lens nor paged indices
    if dcp == 1 and not cascade:
        assert all(v == (True, False, False) for v in got.values())
    if dcp > 1 and not cascade:
        assert got["mixed"] == (True, True, False)
    assert_indptr(a.plan)


@pytest.mark.parametrize("dcp,cascade", [(1, False), (2, False), (1, True)])
def test_seed001_h100_native(dcp, cascade):
    a = require_plan(cfg(dcp_world_size=dcp, cascade=cascade), simulated_node("H100"), engine="flashinfer")
    assert a.backends() == ("fa3", "fa2")
    got = meta_tuple(a.plan)
    assert got == expected_meta(False, False, dcp, cascade)
    assert all(v == (False, True, True) for v in got.values())
    assert_indptr(a.plan)


@pytest.mark.parametrize("dcp,cascade", [(1, False), (2, False)])
def test_seed001_h100_vllm_xqa_decode_reads_block_tables(dcp, cascade):
    """Under vLLM 0.33 the H100 decodes with XQA (trtllm API: block tables + seq_lens) unless vLLM's
    own gate sends DCP to native decode (XQA returns no LSE to merge)."""
    a = require_plan(cfg(dcp_world_size=dcp, cascade=cascade), simulated_node("H100"))
    xqa = dcp == 1 and not cascade
    assert a.backends() == ("fa3", "xqa" if xqa else "fa2")
    assert meta_tuple(a.plan) == expected_meta(False, xqa, dcp, cascade)
    assert_indptr(a.plan)


def test_seed001_h100_vllm_cascade_cannot_merge_xqa_decode():
    """vLLM's 9.0 decode kernel is its own static choice (XQA): no vLLM gate looks at cascade, so a cascade
    merge by LSE meets an XQA that returns none - a rejection under xqa.no-lse, never an fa2 vLLM would not
    run; the FlashInfer layer alone falls back to fa2."""
    a = plan_for(cfg(cascade=True), simulated_node("H100"))
    assert a.status == "rejected" and {v.rule for v in a.violations} == {"xqa.no-lse"}
    b = require_plan(cfg(cascade=True), simulated_node("H100"), engine="flashinfer")
    assert b.backends()[1] == "fa2"


_MIXED_PACK = """
pack: test-mixed
rules:
  - id: test.no-trtllm-{phase}
    title: test rule keeping trtllm-gen out of one phase
    reason: a test-only rule that makes a mixed plan
    source: tests
    backends: [trtllm-gen]
    phases: [{phase}]
    require: {{fact: config.dcp_world_size, min: 1000}}
"""


def ruleset_without_trtllm_in(tmp_path: Path, phase: str):
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    (packs / "zz_test.yaml").write_text(_MIXED_PACK.format(phase=phase))
    return load_ruleset(sorted(packs.glob("*.yaml")), BACKENDS_FILE)


@pytest.mark.parametrize("dcp,cascade", [(1, False), (2, False), (1, True)])
@pytest.mark.parametrize("native_phase", ["decode", "prefill"])
def test_seed001_mixed_trtllm_and_native(tmp_path, native_phase, dcp, cascade):
    rs = ruleset_without_trtllm_in(tmp_path, native_phase)
    a = policy.evaluate(cfg(dcp_world_size=dcp, cascade=cascade, num_speculative_tokens=2), simulated_node("B200"), rs)
    assert a.ok, a.violations
    p_trt, d_trt = native_phase == "decode", native_phase == "prefill"
    assert a.backends() == (TRT if p_trt else "fa2", TRT if d_trt else "fa2")
    got = meta_tuple(a.plan)
    assert got == expected_meta(p_trt, d_trt, dcp, cascade)
    assert got["mixed"][0] is False                    # a mixed batch is never all-trtllm here
    assert got["mixed"][1] and got["mixed"][2]
    assert a.plan.kv_cache.layout == "HND"             # one phase runs trtllm-gen
    assert_indptr(a.plan)
    if native_phase == "decode":
        # speculative decode on the native backend runs the prefill kernel over 1+k tokens
        assert a.plan.decode.q_len_per_req == 3 and a.plan.decode.runs_on_prefill_kernel


@pytest.mark.parametrize("p_trt,d_trt,dcp,cascade",
                         list(itertools.product([False, True], [False, True], [1, 2], [False, True])))
def test_seed001_metadata_truth_table(p_trt, d_trt, dcp, cascade):
    from attnplan.policy.plan import metadata_needs

    m = metadata_needs(cfg(dcp_world_size=dcp, cascade=cascade), p_trt, d_trt)
    got = {k: (getattr(m, k).all_uses_trtllm, getattr(m, k).needs_host_seq_lens, getattr(m, k).needs_paged_kv_indices)
           for k in ("prefill_only", "decode_only", "mixed")}
    assert got == expected_meta(p_trt, d_trt, dcp, cascade)


def test_seed001_spec_decode_on_blackwell_stays_on_trtllm():
    a = require_plan(cfg(num_speculative_tokens=3), simulated_node("GB200"))
    assert a.plan.decode.backend == TRT
    assert a.plan.decode.q_len_per_req == 4
    assert not a.plan.decode.runs_on_prefill_kernel


# -- seed 002: head_dim 512 only through trtllm-gen; fp8 views are float8 -----------------
@pytest.mark.parametrize("dev", ["B200", "GB200", "B300", "GB300"])
def test_seed002_head_dim_512_runs_trtllm_on_10x(dev):
    a = require_plan(cfg(head_dim=512, num_qo_heads=8, num_kv_heads=1), simulated_node(dev))
    assert a.backends() == (TRT, TRT)
    assert a.plan.kv_cache.head_dim_k == 512 and a.plan.kv_cache.head_dim_v == 512


@pytest.mark.parametrize("dev,prefill_skipped", [("H100", ["fa3"]), ("RTX PRO 6000", [])])
def test_seed002_head_dim_512_off_10x_runs_fa2_jit(dev, prefill_skipped):
    """Since seed 002: vLLM 0.33 lists 512 on every capability and FlashInfer's fa2 runs it (measured
    on the H100), JIT-only; fa3 still refuses it and XQA under vLLM takes up to 256."""
    a = plan_for(cfg(head_dim=512), simulated_node(dev))
    assert a.ok, a.violations
    assert a.backends() == ("fa2", "fa2")
    assert [f.skipped for f in a.fallbacks if f.phase == "prefill"] == prefill_skipped
    no_jit = simulated_node(dev).with_fact(jit_toolchain=Fact.measured(False, "no nvcc"))
    b = plan_for(cfg(head_dim=512), no_jit)
    assert b.status == "rejected"
    assert {v.rule for v in b.violations} >= {"jit.toolchain"}
    assert not b.suggestions      # no single-field change gives 512 a kernel there: nothing guessed


def test_seed002_forced_fa2_with_512_needs_jit_auto_runs_trtllm_on_b200():
    node = simulated_node("B200").with_fact(jit_toolchain=Fact.measured(False, "no nvcc"))
    a = plan_for(cfg(head_dim=512, attention_backend="fa2"), node)
    assert a.status == "rejected"
    assert {(v.rule, v.phase, v.backend) for v in a.violations} >= {("jit.toolchain", "prefill", "fa2")}
    # Without a JIT toolchain trtllm-gen cannot run either: its cubins are launched by a module
    # FlashInfer compiles at first use (jit.toolchain check 3, issue 22), so no suggestion names it.
    s = [s for s in a.suggestions if s.field == "attention_backend"]
    assert not [x for x in s if TRT in (x.prefill, x.decode)]
    with_nvcc = plan_for(cfg(head_dim=512), simulated_node("B200").with_fact(jit_toolchain=Fact.measured(True, "nvcc")))
    assert with_nvcc.ok and with_nvcc.backends() == (TRT, TRT)


@pytest.mark.parametrize("dev", ["B200", "H100", "A100", "RTX PRO 6000"])
@pytest.mark.parametrize("kv,view", [("fp8", "float8_e4m3fn"), ("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")])
def test_seed002_fp8_views_are_float8_never_nvfp4(dev, kv, view):
    # the kernel layer: vLLM 0.33 quantizes the query over fp8 on 9.0/10.x (test_engine_layers.py, issue 21)
    a = require_plan(cfg(kv_cache_dtype=kv), simulated_node(dev), engine="flashinfer")
    plan = a.plan
    assert plan.kv_cache.kv_storage_dtype == "uint8"
    assert plan.kv_cache.kv_view_dtype == view
    assert plan.kv_cache.nvfp4_scale_dtype is None and plan.kv_cache.nvfp4_block_size is None
    for ph in (plan.prefill, plan.decode):
        assert ph.kv_storage_dtype == "uint8"
        assert ph.kv_view_dtype == view
        assert "nvfp4" not in ph.kv_view_dtype
        assert ph.query_dtype == "bfloat16"           # only nvfp4 quantizes the query
        for m in ph.modules:
            assert m.params["dtype_kv"] == view


@pytest.mark.parametrize("dtype,torch_name", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_seed002_auto_kv_is_query_dtype(dtype, torch_name):
    plan = require_plan(cfg(dtype=dtype), simulated_node("B200")).plan
    assert plan.kv_cache.kv_storage_dtype == plan.kv_cache.kv_view_dtype == torch_name


def test_seed002_nvfp4_is_explicit_packed_uint8_with_fp8_scales():
    plan = require_plan(cfg(kv_cache_dtype="nvfp4"), simulated_node("B200")).plan
    assert plan.kv_cache.kv_storage_dtype == "uint8"
    assert plan.kv_cache.nvfp4_scale_dtype == "float8_e4m3fn"
    assert plan.kv_cache.nvfp4_block_size
    assert plan.prefill.query_dtype == plan.decode.query_dtype == "float8_e4m3fn"


# -- seed 003: nvfp4 off sm100f fails at startup with a verified alternative --------------
def test_seed003_nvfp4_on_sm120_runs_fa2_under_vllm_033():
    """Seed 003's rejection was true for the vLLM of its PR (not modelled: an error, never a guess);
    vLLM 0.33 with FlashInfer 0.7.2 reads NVFP4 on an RTX PRO 6000 through fa2 (XQA decode on 12.x)."""
    a = require_plan(cfg(kv_cache_dtype="nvfp4"), simulated_node("RTX PRO 6000"))
    assert a.backends() == ("fa2", "xqa")
    assert a.engine.name == "vllm" and a.engine.version == "0.33.0"
    assert a.plan.attention.split_kv == "disabled"           # FlashInfer disables split-KV for NVFP4 on 12.x
    with pytest.raises(policy.InvalidInputError) as info:
        plan_for(cfg(kv_cache_dtype="nvfp4"), simulated_node("RTX PRO 6000"), engine="vllm==0.20.0")
    assert "0.33" in str(info.value)


def test_seed003_nvfp4_on_sm120_raises_at_require_plan():
    # where vLLM 0.33 still cannot read NVFP4 (fa2 misreads it at head 64), it fails at startup
    config = cfg(kv_cache_dtype="nvfp4", head_dim=64)
    node = simulated_node("RTX PRO 6000")
    with pytest.raises(ValueError) as info:                   # a ValueError, as vLLM raises
        require_plan(config, node)
    exc = info.value
    assert isinstance(exc, UnsupportedConfigurationError)
    assert exc.answer.status == "rejected"
    assert any(v.rule == "vllm.nvfp4" and v.phase == "both" for v in exc.violations)
    text = str(exc)
    assert len(exc.violations) >= 1
    for v in exc.violations:
        assert f"[{v.rule}]" in text
        assert v.message in text
    kv = [s for s in exc.suggestions if s.field == "kv_cache_dtype"]
    assert kv, exc.suggestions
    assert all(s.value != "nvfp4" for s in kv)
    assert "kv_cache_dtype=" in text
    for s in kv:
        c2, n2 = apply_suggestion(config, node, s)
        assert n2 == node
        ok = require_plan(c2, n2)                              # the suggestion itself passes
        assert ok.backends() == (s.prefill, s.decode)


def test_seed003_plan_for_does_not_raise():
    a = plan_for(cfg(kv_cache_dtype="nvfp4", head_dim=64), simulated_node("RTX 5090"))
    assert a.status == "rejected" and a.plan is None


@pytest.mark.parametrize("dev", ["B200", "B300"])
def test_seed003_nvfp4_on_sm100f_plans(dev):
    a = require_plan(cfg(kv_cache_dtype="nvfp4"), simulated_node(dev))
    assert a.backends() == (TRT, TRT)


# -- seed 004 (policy side): ragged MLA prefill for DeepSeek shapes on 10.x ---------------
@pytest.mark.parametrize("nope,v", [(128, 128), (192, 256)])
def test_seed004_trtllm_ragged_prefill_on_10x(nope, v):
    a = require_plan(AttentionConfig(kv_lora_rank=512, qk_nope_head_dim=nope, qk_rope_head_dim=64, v_head_dim=v,
                                     num_qo_heads=128), simulated_node("B200"))
    assert a.backends() == ("trtllm-ragged", "trtllm-gen-mla")
    assert a.plan.kv_cache.layout == "HND"

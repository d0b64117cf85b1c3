"""Engine layers (SPEC §10): which engine and version an answer speaks for, and the layer of each rule."""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.policy import AttentionConfig, Fact, InvalidInputError, simulated_node
from attnplan.node import ProbeIO, probe_node
from attnplan.render import finish

LLAMA = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8)


@pytest.mark.parametrize("engine,name,version", [
    (None, "vllm", "0.33.0"), ("vllm", "vllm", "0.33.0"), ("vllm==0.33.0", "vllm", "0.33.0"),
    ("VLLM == 0.33.1", "vllm", "0.33.1"), ("flashinfer", "flashinfer", "0.7.2.post1"),
])
def test_engine_is_resolved_and_recorded(engine, name, version):
    a = policy.plan_for(LLAMA, simulated_node("H100"), engine=engine)
    assert (a.engine.name, a.engine.version) == (name, version)


def test_installed_vllm_is_the_default_engine():
    node = simulated_node("H100").with_fact(vllm_version=Fact.measured("0.33.2"))
    assert policy.plan_for(LLAMA, node).engine.version == "0.33.2"


@pytest.mark.parametrize("engine", ["sglang==0.5.20", "sgl", "vllm==0.34.0", "vllm==0.30.9", "flashinfer==0.6.0", "vllm==latest"])
def test_uncovered_engine_names_the_covered_ones(engine):
    with pytest.raises(InvalidInputError) as info:
        policy.plan_for(LLAMA, simulated_node("H100"), engine=engine)
    assert "vllm==0.33.0" in str(info.value) and "flashinfer" in str(info.value)
    rs = policy.default_ruleset()
    # every modelled release of each engine, as the data lists them (backends.yaml engines.<name>.versions)
    want = [n for name, spec in rs.engines.items() for n in [name, *(f"{name}=={v}" for v in spec.versions)]]
    assert policy.engine_names(rs) == want and "sglang==0.5.21" in want and "vllm==0.33.0" in want


def test_every_violation_carries_its_rules_layer():
    rs = policy.default_ruleset()
    layer = {r.id: r.layer for r in rs.rules}
    a = policy.plan_for(LLAMA.replace(head_dim=96, batch_invariant=True, attention_backend="fa3"), simulated_node("B200"))
    assert a.status == "rejected"
    assert {v.layer for v in a.violations} == {"kernel", "engine"}
    for v in a.violations:
        assert v.layer == layer[v.rule]


def test_engine_rules_never_apply_under_flashinfer():
    a = policy.evaluate(LLAMA.replace(head_dim=96), simulated_node("H100"), engine="flashinfer")
    assert not [e for e in a.trace if e.layer == "engine"]
    b = policy.evaluate(LLAMA, simulated_node("H100"))
    assert [e for e in b.trace if e.layer == "engine"]


def test_evaluate_candidate_is_the_engines_view():
    node = simulated_node("H100")
    xqa = policy.evaluate_candidate(LLAMA, node, "decode", "xqa")
    assert xqa.ok and xqa.pages == (16, 32, 64)
    fi = policy.evaluate_candidate(LLAMA, node, "decode", "xqa", engine="flashinfer")
    assert fi.ok and 128 in fi.pages
    gated = policy.evaluate_candidate(LLAMA, simulated_node("H100", cubins="missing"), "decode", "xqa")
    assert {v.rule for v in gated.violations} == {"vllm.trtllm-gate"}


def test_apply_suggestion_uses_the_callers_rules():
    rs = policy.default_ruleset()
    node = simulated_node("B300", flashinfer_version="0.6.7")
    a = policy.plan_for(LLAMA.replace(attention_backend="trtllm-gen"), node, ruleset=rs)
    s = next(s for s in a.suggestions if s.field == "flashinfer_version")
    cfg2, node2 = policy.apply_suggestion(a.config, node, s, rs)
    assert policy.evaluate(cfg2, node2, rs).ok


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.invalid/"])
def test_non_http_artifactory_never_counts(url):
    gpu = {"count": 1, "name": "NVIDIA B200", "capability": 100, "memory_gib": 179.0, "driver": "580", "mig": False}
    io = ProbeIO(nvml=lambda: gpu, package_version=lambda d: {"flashinfer-python": "0.7.2.post1"}.get(d),
                 env={"FLASHINFER_CUBINS_REPOSITORY": url}, hostname=lambda: "n", torch_cuda=lambda: None,
                 which=lambda p: None, default_cubin_dir=None)
    node = probe_node(io, artifactory_timeout=0.5)
    assert node.artifactory_reachable.value is False and "HTTP" in node.artifactory_reachable.detail
    assert policy.plan_for(LLAMA, node).backends() == ("fa2", "fa2")


# -- issue 21: the classes the vLLM oracle found, fixed as data -----------------------------------------
def _vllm(cfg, device, **node_kw):
    # finished: the planner leaves its notes as data, render/ writes them (issue 36 item 6)
    return finish(policy.plan_for(cfg, simulated_node(device, **node_kw), engine="vllm"))


def _rules(a):
    return {v.rule for v in a.violations}


def test_fp8_kv_prefill_query_is_fp8_on_hopper_and_runs_fa3():
    """get_q_data_type: fp8 prefill query on 9.0 (FA3), bf16 decode query for XQA; the flashinfer layer keeps bf16."""
    a = _vllm(LLAMA.replace(kv_cache_dtype="fp8"), "H100")
    p = a.plan
    assert (p.prefill.backend, p.prefill.query_dtype) == ("fa3", "float8_e4m3fn")
    assert (p.decode.backend, p.decode.query_dtype) == ("xqa", "bfloat16")
    fi = policy.plan_for(LLAMA.replace(kv_cache_dtype="fp8"), simulated_node("H100"), engine="flashinfer").plan
    assert (fi.prefill.backend, fi.prefill.query_dtype) == ("fa2", "bfloat16")


def test_fp8_kv_query_is_fp8_in_both_phases_on_blackwell():
    p = _vllm(LLAMA.replace(kv_cache_dtype="fp8"), "B200").plan
    assert (p.prefill.query_dtype, p.decode.query_dtype) == ("float8_e4m3fn", "float8_e4m3fn")
    assert (p.prefill.backend, p.decode.backend) == ("trtllm-gen", "trtllm-gen")


@pytest.mark.parametrize("cfg,device", [
    (LLAMA.replace(head_dim=512, kv_cache_dtype="fp8"), "H100"),          # fa3 has no 512: fa2 refuses an fp8 query
    (LLAMA.replace(kv_cache_dtype="fp8_e5m2"), "B200"),                    # e5m2 query, no trtllm prefill: fa2
    (LLAMA.replace(kv_cache_dtype="fp8", dcp_world_size=2), "B200"),       # DCP prefill is native: fa2 with an fp8 query
])
def test_fp8_query_on_fa2_is_refused(cfg, device):
    a = _vllm(cfg, device)
    assert a.status == "rejected"
    assert any(v.rule == "dtype.query" and v.backend == "fa2" and v.phase == "prefill" for v in a.violations)


def test_dcp_prefill_runs_trtllm_gen_only_over_an_unquantized_cache():
    ok = _vllm(LLAMA.replace(dcp_world_size=2), "B200")
    assert ok.plan.prefill.backend == "trtllm-gen"
    windowed = _vllm(LLAMA.replace(dcp_world_size=2, sliding_window=4096), "B200")
    assert windowed.plan.prefill.backend == "fa2"
    assert any(f.rules == ("vllm.dcp-prefill",) for f in windowed.fallbacks)


def test_block_size_is_not_the_kernel_page():
    """--block-size 128 on an H100: vLLM accepts it (a multiple of 64) and runs kernel pages of 64."""
    a = _vllm(LLAMA.replace(page_size=128), "H100")
    assert a.ok and (a.plan.kv_cache.block_size, a.plan.kv_cache.page_size) == (128, 64)
    assert any("select_common_block_size" in n for n in a.notes)
    assert _vllm(LLAMA.replace(page_size=48), "H100").plan.kv_cache.page_size == 16
    assert _vllm(LLAMA.replace(page_size=8), "H100").status == "rejected"
    # on 10.x with trtllm-gen GQA the kernels take the block itself
    big = _vllm(LLAMA.replace(page_size=256), "B200").plan.kv_cache
    assert (big.block_size, big.page_size) == (256, 256)
    # --engine flashinfer: the page is what it says
    assert policy.plan_for(LLAMA.replace(page_size=128), simulated_node("H100"), engine="flashinfer").plan.kv_cache.page_size == 128


@pytest.mark.parametrize("device,kernel", [("B200", "trtllm-gen decode"), ("H100", "XQA decode"), ("RTX PRO 6000", "XQA decode")])
def test_soft_cap_dropped_by_vllm_is_a_rejection(device, kernel):
    a = _vllm(LLAMA.replace(head_dim=256, logits_soft_cap=50.0), device)
    assert a.status == "rejected" and "vllm.softcap-dropped" in _rules(a)
    msg = next(v.message for v in a.violations if v.rule == "vllm.softcap-dropped")
    assert f"vLLM would run {kernel} and ignore the soft cap of 50" in msg and "outputs differ from the model" in msg
    assert next(v.fix for v in a.violations if v.rule == "vllm.softcap-dropped")


def test_soft_cap_kept_where_vllm_runs_native_kernels():
    # no artifactory: vLLM's trtllm gate fails, FlashInfer's native kernels apply the soft cap
    a = _vllm(LLAMA.replace(head_dim=256, logits_soft_cap=50.0), "B200", cubins=False)
    assert a.ok and a.plan.attention.logits_soft_cap == 50.0 and a.plan.decode.backend == "fa2"
    assert _vllm(LLAMA.replace(head_dim=256, logits_soft_cap=50.0), "A100").ok
    # the kernel layer alone never drops it: fa2 serves it
    assert policy.plan_for(LLAMA.replace(head_dim=256, logits_soft_cap=50.0), simulated_node("B200"), engine="flashinfer").ok


DSV3 = AttentionConfig(num_qo_heads=128, num_kv_heads=1, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                       v_head_dim=128)


def test_vllm_refuses_flashinfer_for_mla_and_flashinfer_mla_for_standard():
    a = _vllm(DSV3.replace(attention_backend="FLASHINFER"), "B200")
    assert a.status == "rejected" and "vllm.backend-kind" in _rules(a)
    b = _vllm(LLAMA.replace(attention_backend="FLASHINFER_MLA"), "B200")
    assert b.status == "rejected" and "vllm.backend-kind" in _rules(b)
    assert _vllm(DSV3.replace(attention_backend="FLASHINFER_MLA"), "B200").ok
    assert _vllm(LLAMA.replace(attention_backend="FLASHINFER"), "B200").ok


def test_flashinfer_mla_is_blackwell_only_in_vllm():
    a = _vllm(DSV3, "H100")
    assert a.status == "rejected" and "vllm.mla-backend" in _rules(a)
    assert a.engine_backend.name == "FLASH_ATTN_MLA" and not a.engine_backend.runs_flashinfer
    assert policy.plan_for(DSV3, simulated_node("H100"), engine="flashinfer").ok  # FlashInfer's own MLA still plans
    assert _vllm(DSV3, "B200").plan.decode.backend == "trtllm-gen-mla"


@pytest.mark.parametrize("cfg,device,name,runs", [
    (LLAMA, "H100", "FLASH_ATTN", False), (LLAMA, "B200", "FLASHINFER", True), (LLAMA, "A100", "FLASH_ATTN", False),
    (LLAMA.replace(kv_cache_dtype="fp8"), "A100", "FLASHINFER", True),       # FA2 has no fp8 KV: FlashInfer next
    (LLAMA.replace(kv_cache_dtype="fp8_e5m2"), "H100", "FLASHINFER", True),  # FLASH_ATTN has no e5m2
    (LLAMA.replace(head_dim=512), "RTX PRO 6000", "FLASHINFER", True),       # no FA4 on 12.x: head 512 goes to FlashInfer
    (DSV3, "B200", "FLASHINFER_MLA", True), (DSV3, "RTX PRO 6000", "TRITON_MLA", False),
])
def test_engine_backend_says_what_vllm_picks(cfg, device, name, runs):
    a = _vllm(cfg, device)
    eb = a.engine_backend
    assert (eb.name, eb.runs_flashinfer) == (name, runs)
    assert "_get_backend_priorities" in eb.source
    assert name in eb.note
    if not runs and a.ok:   # the plan is labelled as what vLLM runs when asked for its FlashInfer backend
        assert f"the plan below is what it runs with --attention-backend {eb.flashinfer_backend_name}" in eb.note
    if not a.ok:
        assert "plan below" not in eb.note
    assert a.to_json()["engine_backend"]["name"] == name


def test_flashinfer_layer_has_no_engine_backend():
    assert policy.plan_for(LLAMA, simulated_node("H100"), engine="flashinfer").engine_backend is None


def test_render_first_line_says_what_vllm_runs():
    from attnplan.render import render_answer

    text = render_answer(_vllm(LLAMA, "H100"))
    first = text.splitlines()[0]
    # the verdict leads (what the command as given runs); the FlashInfer plan follows, said to be "if forced"
    assert "FLASH_ATTN" in first
    forced = next(line for line in text.splitlines() if "--attention-backend FLASHINFER" in line)
    assert text.index(forced) > text.index(first) and "if forced" in forced


def test_engine_rows_compile():
    from attnplan.policy.engine_rows import compile_all

    compile_all(policy.default_ruleset())

"""Engine layers (SPEC §10): which engine and version an answer speaks for, and the layer of each rule."""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.policy import AttentionConfig, Fact, InvalidInputError, ProbeIO, probe_node, simulated_node

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


@pytest.mark.parametrize("engine", ["sglang==0.5.22", "sgl", "vllm==0.34.0", "vllm==0.32.9", "flashinfer==0.6.0", "vllm==latest"])
def test_uncovered_engine_names_the_covered_ones(engine):
    with pytest.raises(InvalidInputError) as info:
        policy.plan_for(LLAMA, simulated_node("H100"), engine=engine)
    assert "vllm==0.33.0" in str(info.value) and "flashinfer" in str(info.value)
    assert policy.engine_names(policy.default_ruleset()) == ["vllm", "vllm==0.33.0", "flashinfer", "sglang", "sglang==0.5.23"]


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

"""The engine is parsed once where it enters (``parse_engine`` -> ``EngineSpec``) and carried as a
value: an engine the rules do not model fails at parse time, without a node; what depends on the
node (its installed vllm) is resolved later; the value plans exactly as the text it was parsed from."""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.adapter.startup import check_plan, engine_of
from attnplan.policy import (AttentionConfig, EngineSpec, Fact, InvalidInputError, parse_engine, resolve_engine,
                             simulated_node)

LLAMA = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8)
RS = policy.default_ruleset()


@pytest.mark.parametrize("text,name,version", [
    (None, "vllm", None), ("vllm", "vllm", None), ("VLLM == 0.33.1", "vllm", "0.33.1"),
    ("flashinfer", "flashinfer", None), ("sglang==0.5.23", "sglang", "0.5.23"),
])
def test_parse_gives_a_value(text, name, version):
    spec = parse_engine(text, RS)
    assert (spec.name, spec.version) == (name, version)
    assert parse_engine(spec, RS) is spec  # parsed once: a spec passes through untouched
    assert parse_engine(str(spec), RS) == spec  # and names itself as the text it parses from


@pytest.mark.parametrize("text", ["sgl", "vllm==", "vllm==0.34.0", "flashinfer==0.6.0", "vllm==latest"])
def test_invalid_engine_fails_at_parse_time(text):
    # No node is needed to know that the rules do not model it.
    with pytest.raises(InvalidInputError) as info:
        parse_engine(text, RS)
    assert info.value.field == "engine" and "vllm==0.33.0" in str(info.value)


def test_node_is_needed_only_for_the_installed_release():
    spec = parse_engine("vllm", RS)
    assert resolve_engine(spec, None, RS).version == RS.engines["vllm"].versions[-1]  # no node: newest modelled
    node = simulated_node("H100").with_fact(vllm_version=Fact.measured("0.33.2"))
    assert resolve_engine(spec, node, RS).version == "0.33.2"
    old = simulated_node("H100").with_fact(vllm_version=Fact.measured("0.20.0"))
    with pytest.raises(InvalidInputError, match="installed on this node"):
        resolve_engine(spec, old, RS)
    # flashinfer's layer is always the node's own flashinfer
    fi = parse_engine("flashinfer", RS)
    assert resolve_engine(fi, None, RS).version is None
    assert resolve_engine(fi, node, RS).version == node.flashinfer_version.value


@pytest.mark.parametrize("device", ["H100", "B200"])
@pytest.mark.parametrize("text", [None, "vllm==0.33.0", "flashinfer"])
def test_the_value_plans_as_its_text(device, text):
    node = simulated_node(device)
    spec = parse_engine(text, RS)
    assert policy.plan_for(LLAMA, node, engine=spec) == policy.plan_for(LLAMA, node, engine=text)
    assert policy.explain(LLAMA, node, engine=spec).cells == policy.explain(LLAMA, node, engine=text).cells


def test_matrix_takes_the_value():
    spec = parse_engine("flashinfer", RS)
    assert policy.capability_matrix(RS, engine=spec) == policy.capability_matrix(RS, engine="flashinfer")
    assert "## Engine `flashinfer`" in policy.matrix_markdown(RS, engine=spec)


def test_spec_matches_the_answers_it_asks_for():
    b200 = simulated_node("B200")
    pinned = policy.plan_for(LLAMA, b200, engine="vllm==0.33.0")
    assert parse_engine("vllm", RS).matches(pinned.engine)
    assert parse_engine("vllm==0.33.0", RS).matches(pinned.engine)
    assert not parse_engine("vllm==0.33.1", RS).matches(pinned.engine)
    assert not parse_engine("flashinfer", RS).matches(pinned.engine)


@pytest.mark.parametrize("text", ["vllm==0.33.1", "flashinfer"])
def test_startup_check_re_evaluates_the_same_layer_as_a_value(text):
    node = simulated_node("H100")
    answer = policy.plan_for(LLAMA, node, engine=text)
    spec = engine_of(answer)
    assert isinstance(spec, EngineSpec) and spec.name == answer.engine.name
    # flashinfer's release is the node's: the startup check does not pin it
    assert spec.version == (None if text == "flashinfer" else "0.33.1")
    assert check_plan(answer, node).engine == answer.engine

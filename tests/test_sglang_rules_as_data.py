"""Issue 39: SGLang's resolution is rule data - every decision a row of backends.yaml engines.sglang.native
(pipeline, build_phase, build) naming its rule, its condition read by the one evaluator (policy/conditions.py).
A rule a row needs that the packs lack fails the load naming it (never a KeyError at plan time); changing a
row changes SGLang's answer; a row naming a fact, platform or template key that does not exist fails the load."""

from __future__ import annotations

import ast
import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from attnplan import policy
from attnplan.policy import simulated_node
from attnplan.policy.errors import RulePackError
from attnplan.policy.shipped import load_rules
from attnplan.rules import PACKS_DIR
from attnplan.sglang import SglangEngine, SglangFlags
from attnplan.sglang.data import CODE_RULES, native
from attnplan.sglang.resolve import ModelFacts, Platform, resolve

ROOT = Path(__file__).resolve().parents[1]
RS = policy.default_ruleset()
RELEASES = RS.engines["sglang"].versions
LLAMA = policy.make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8, "dtype": "bf16"})


def _row_rules() -> set[str]:
    return {r.rule for v in RELEASES for _, r in native(RS, "sglang", v).rows()}


def _without(tmp_path: Path, rule_id: str) -> Path:
    d = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, d)
    p = d / "sglang.yaml"
    data = yaml.safe_load(p.read_text())
    kept = [r for r in data["rules"] if r["id"] != rule_id]
    assert len(kept) == len(data["rules"]) - 1, rule_id
    p.write_text(yaml.safe_dump({**data, "rules": kept}, sort_keys=False))
    return d


def _with_native(**update) -> policy.RuleSet:
    spec = RS.engines["sglang"]
    return dataclasses.replace(RS, engines={**RS.engines, "sglang": spec.model_copy(
        update={"native": {**spec.native, **update}})})


def test_the_rows_name_every_sglang_rule_the_resolution_applies():
    # every engine rule the packs hold for SGLang, but the two the code checks (input vocabulary) and the one the
    # FlashInfer side explains (not-flashinfer), is some row's
    pack_ids = {r.id for r in RS.rules if r.id.startswith("sglang.")}
    assert _row_rules() == pack_ids - CODE_RULES - {"sglang.not-flashinfer"}


@pytest.mark.parametrize("rule_id", sorted(_row_rules()))
def test_a_pack_set_without_a_rule_a_row_names_fails_to_load_naming_it(tmp_path, rule_id):
    d = _without(tmp_path, rule_id)
    with pytest.raises(RulePackError) as info:
        load_rules(d)   # the load itself: no plan is made
    assert repr(rule_id) in str(info.value) or info.value.rule == rule_id, str(info.value)


def test_every_row_cites_the_sglang_function_that_decides_it():
    for v in RELEASES:
        for where, row in native(RS, "sglang", v).rows():
            assert row.source and (".py " in row.source or row.source.endswith(".py")), (v, where, row.source)


def test_the_resolver_code_names_no_backend_platform_or_architecture():
    # the row interpreter (resolve, _Run) carries no SGLang decision: no backend name, platform predicate,
    # KV dtype or architecture is spelled in it - they are all in the rows
    t = native(RS)
    vocabulary = set(t.backends) | set(t.platform) | {"fp8_e4m3", "fp8_e5m2", "nvfp4", "auto", "bf16"}
    vocabulary |= {a for _, r in t.rows() for a in str(r.when).split("'") if a.endswith(("ForCausalLM", "Generation"))}
    tree = ast.parse((ROOT / "attnplan" / "sglang" / "resolve.py").read_text())
    code = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in ("resolve", "_Run", "_is")]
    assert len(code) == 3
    spelled = {c.value for n in code for c in ast.walk(n) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert not spelled & vocabulary, sorted(spelled & vocabulary)


def _sm90():
    return Platform(90, (12, 8))


def test_changing_a_row_changes_sglangs_answer():
    flags = SglangFlags(attention_backend="fa3", kv_cache_dtype="fp8_e5m2", architecture="LlamaForCausalLM")
    m = ModelFacts(group_size=4, architecture="LlamaForCausalLM")
    r = resolve(flags, m, _sm90(), native(RS))
    assert r.attention_backend == "triton" and [c.rule for c in r.coercions] == ["sglang.fa3-e5m2"]
    rows = [r for r in RS.engines["sglang"].native["pipeline"] if r["rule"] != "sglang.fa3-e5m2"]
    r2 = resolve(flags, m, _sm90(), native(_with_native(pipeline=rows)))
    assert r2.attention_backend == "fa3" and not r2.coercions


def test_a_refusal_row_refuses_with_its_rule_phase_and_outcome():
    # trtllm_mha decode on SM80: the startup row of attention_hook.py; fa3 on SM120 at backend build
    r = resolve(SglangFlags(decode_attention_backend="trtllm_mha"), ModelFacts(group_size=4), Platform(80, (12, 8)), native(RS))
    assert (r.refusal.rule, r.refusal.phase, r.refusal.outcome) == ("sglang.trtllm-mha-capability", "decode", "startup")
    r = resolve(SglangFlags(attention_backend="fa3"), ModelFacts(group_size=4), Platform(120, (12, 8)), native(RS))
    assert (r.refusal.rule, r.refusal.phase, r.refusal.outcome) == ("sglang.fa3-capability", "prefill", "backend-build")
    assert resolve(SglangFlags(attention_backend="fa3"), ModelFacts(group_size=4), Platform(120, (12, 8)), native(RS),
                   build=False).ok


def test_release_rows_follow_versions():
    names = {v: {r.rule for _, r in native(RS, "sglang", v).rows()} for v in RELEASES}
    assert "sglang.tokenspeed-mla" in names["0.5.21"] and "sglang.tokenspeed-mla" not in names["0.5.23"]
    assert "sglang.tokenspeed-mla-alias" in names["0.5.23"] and "sglang.tokenspeed-mla-alias" not in names["0.5.22"]
    gemma = ModelFacts(group_size=4, architecture="Gemma4ForCausalLM")
    fa4 = SglangFlags(attention_backend="fa4", architecture="Gemma4ForCausalLM")
    b200 = Platform(100, (12, 8))
    assert resolve(fa4, gemma, b200, native(RS, "sglang", "0.5.21")).refusal.rule == "sglang.gemma4-backends"
    assert resolve(fa4, gemma, b200, native(RS, "sglang", "0.5.22")).ok


@pytest.mark.parametrize("bad,word", [
    ({"rule": "sglang.fa3-e5m2", "source": "x.py f", "when": {"fact": "sglang.no_such_fact", "eq": 1}}, "sglang.no_such_fact"),
    ({"rule": "sglang.fa3-e5m2", "source": "x.py f", "refuse": {"message": "{no_such_key}"}}, "no_such_key"),
    ({"rule": "sglang.fa3-e5m2", "source": "x.py f", "set": {"attention_backend": {"choose": "no_such_choice"}}}, "no_such_choice"),
    ({"rule": "sglang.fa3-e5m2", "source": "x.py f", "set": {"no_such_var": 1}}, "no_such_var"),
    ({"rule": "sglang.fa3-e5m2", "source": "x.py f", "refuse": {"message": "m"}, "set": {"page_size": 1}}, "not both"),
])
def test_a_malformed_row_fails_naming_what(bad, word):
    rs = _with_native(pipeline=[bad, *RS.engines["sglang"].native["pipeline"]])
    with pytest.raises(RulePackError, match=word):
        native(rs)


def test_plans_answer_from_the_rows_on_every_entry_point():
    # the plan pipeline (engine_resolution) reads the same rows: GPT-OSS's assert refuses flashinfer at startup
    cfg = LLAMA.replace(sinks=True)
    a = policy.plan_for(cfg, simulated_node("B200"), engine=SglangEngine(SglangFlags(
        attention_backend="flashinfer", architecture="GptOssForCausalLM")))
    assert [(v.rule, v.outcome) for v in a.violations if v.outcome] == [("sglang.gpt-oss-backends", "startup")]


def test_the_evaluator_takes_sglangs_facts_only_where_asked_and_reads_powers_of_two():
    from attnplan.policy.conditions import compile_condition
    from attnplan.policy.errors import ConditionError
    from attnplan.sglang.facts import names

    with pytest.raises(ConditionError, match="sglang.prefill"):   # the rule packs' catalog has no SGLang facts
        compile_condition({"fact": "sglang.prefill", "eq": "fa3"})
    odd = compile_condition({"fact": "sglang.page_size", "power_of_two": False}, names(["is_sm100"]))
    assert [p for p in (None, 1, 64, 96, 128, 192, 256) if odd.test({"sglang.page_size": p})] == [96, 192]
    with pytest.raises(ConditionError, match="power_of_two"):
        compile_condition({"fact": "config.page_size", "power_of_two": 2})

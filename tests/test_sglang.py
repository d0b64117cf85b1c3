"""SGLang 0.5.23 as a second engine layer (issue 26): its pick per phase, silent coercions, refusals by
phase, the FlashInfer plan of the backends that run FlashInfer, the launch_server line and the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan.render import finish
from attnplan import policy
from attnplan.model import config_from_hf
from attnplan.adapter.startup import refuse_foreign_engine_backend
from attnplan.cli.main import main as cli_main
from attnplan.policy import UnsupportedConfigurationError, simulated_node
from attnplan.policy.errors import RulePackError
from attnplan.sglang import SglangEngine, SglangFlags
from attnplan.sglang.data import native

ROOT = Path(__file__).resolve().parents[1]
LLAMA = policy.make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8})
DSV3 = config_from_hf(ROOT / "examples" / "deepseek-v3.json")
RS = policy.default_ruleset()
T = native(RS)


def sgl(config, device, **flags):
    """SGLang's answer; KV dtype, page size and deterministic mode travel in the config (as launch_server puts them)."""
    over = {k: flags.pop(f) for f, k in (("kv_cache_dtype", "kv_cache_dtype"), ("page_size", "page_size"),
                                         ("enable_deterministic_inference", "batch_invariant")) if f in flags}
    # finished: the planner leaves its notes as data, render/ writes them (issue 36 item 6)
    return finish(policy.plan_for(config.replace(**over), simulated_node(device), engine=SglangEngine(SglangFlags(**flags))))


def test_engine_pack_applies_under_its_engine_only():
    sg = [r for r in RS.rules if r.engine == "sglang"]
    assert sg and all(r.versions is not None and r.applied_by == "resolver" for r in sg)
    # the pack's range is every modelled release; a rule of one release only carries its own narrower range
    assert any(r.applies("sglang", "0.5.23", None) for r in sg) and any(r.applies("sglang", "0.5.21", None) for r in sg)
    assert not any(r.applies("vllm", "0.33.0", None) or r.applies("sglang", "0.5.24", None) for r in sg)
    assert not any(r.applies("sglang", "0.5.23", None) for r in RS.rules if r.layer == "engine" and r.engine is None)


def test_vllm_answers_carry_no_engine_layer_fields():
    data = policy.plan_for(LLAMA, simulated_node("B200")).to_json()
    assert not {"engine_phases", "coercions"} & set(data)
    assert all("outcome" not in v for v in policy.plan_for(LLAMA.replace(head_dim=96), simulated_node("H100")).to_json()["violations"])


def _forced_page(rule: str) -> int:
    """The page size a page-constraint row of SGLang's resolution (backends.yaml engines.sglang.native.pipeline) sets."""
    return next(r.set["page_size"] for r in T.pipeline if r.rule == rule and "page_size" in r.set)


def test_b200_default_is_trtllm_mha_with_the_page_forced_silently():
    a = sgl(LLAMA, "B200")
    assert a.ok and a.engine.name == "sglang" and a.engine.version == "0.5.23"
    assert {ph: eb.name for ph, eb in a.engine_phases.items()} == {"prefill": "trtllm_mha", "decode": "trtllm_mha"}
    assert a.backends() == ("trtllm-gen", "trtllm-gen") and a.engine_backend.runs_flashinfer
    forced = _forced_page("sglang.trtllm-mha-page")
    assert [(c.field, c.given, c.runs, c.rule) for c in a.coercions] == [("page_size", None, forced, "sglang.trtllm-mha-page")]
    assert a.plan.kv_cache.page_size == forced
    assert sgl(LLAMA, "B200", page_size=32).plan.kv_cache.page_size == 32 and not sgl(LLAMA, "B200", page_size=32).coercions
    assert sgl(LLAMA, "B200", page_size=8).coercions[0].given == 8


def test_h100_fa3_is_sgl_kernel_not_flashinfer_and_the_adapter_refuses_it():
    a = sgl(LLAMA, "H100")
    assert a.ok and {eb.name for eb in a.engine_phases.values()} == {"fa3"}
    assert not a.engine_backend.runs_flashinfer and "sgl-kernel" in a.engine_phases["decode"].note
    assert a.backends() == ("fa2", "fa2")  # what SGLang runs with --attention-backend flashinfer
    assert any("--attention-backend flashinfer" in n for n in a.notes)
    with pytest.raises(UnsupportedConfigurationError) as info:
        refuse_foreign_engine_backend(a)
    assert {v.rule for v in info.value.answer.violations} == {"sglang.not-flashinfer"} and "fa3" in str(info.value)
    refuse_foreign_engine_backend(sgl(LLAMA, "H100", attention_backend="flashinfer"))  # FlashInfer: no refusal


def test_fa3_with_e5m2_is_switched_to_triton():
    a = sgl(LLAMA, "H100", attention_backend="fa3", kv_cache_dtype="fp8_e5m2")
    assert [(c.field, c.given, c.runs) for c in a.coercions] == [("attention_backend", "fa3", "triton")]
    assert a.engine_phases["prefill"].name == "triton" and not a.engine_phases["prefill"].runs_flashinfer


@pytest.mark.parametrize("device,rule,outcome", [
    ("H100", "sglang.nvfp4-capability", "startup"),
    ("A100", "sglang.trtllm-mha-capability", "startup"),
])
def test_nvfp4_off_blackwell_is_refused_at_startup(device, rule, outcome):
    a = sgl(LLAMA.replace(kv_cache_dtype="nvfp4"), device, kv_cache_dtype="nvfp4")
    assert a.status == "rejected"
    assert [(v.rule, v.outcome, v.layer) for v in a.violations if v.outcome] == [(rule, outcome, "engine")]


def test_nvfp4_on_sm120_prefills_flashinfer_and_decodes_trtllm_mha_on_xqa():
    a = sgl(LLAMA.replace(kv_cache_dtype="nvfp4"), "RTX PRO 6000", kv_cache_dtype="nvfp4")
    assert {ph: eb.name for ph, eb in a.engine_phases.items()} == {"prefill": "flashinfer", "decode": "trtllm_mha"}
    assert a.ok and a.backends() == ("fa2", "xqa")


def test_gpt_oss_refuses_flashinfer_at_startup():
    la = _launch("--model-path", str(ROOT / "examples/gpt-oss-120b.json"), "--attention-backend", "flashinfer", device="H100")
    assert not la.ok
    vs = [v for g in la.model.layer_groups for v in g.violations if v.outcome] if la.model else list(la.answer.violations)
    assert vs and {v.rule for v in vs} == {"sglang.gpt-oss-backends"} and {v.outcome for v in vs} == {"startup"}


def test_gpt_oss_on_sm120_runs_triton_and_says_flashinfer_is_refused_there():
    la = _launch("--model-path", str(ROOT / "examples/gpt-oss-120b.json"), device="RTX PRO 6000")
    for g in la.model.attention_groups:
        eb = g.answer.engine_phases["decode"]
        assert eb.name == "triton" and not eb.runs_flashinfer and "[sglang.gpt-oss-backends]" in eb.note


def test_fa3_on_blackwell_fails_when_the_backend_is_built():
    a = sgl(LLAMA, "B200", attention_backend="fa3")
    assert [(v.rule, v.outcome) for v in a.violations] == [("sglang.fa3-capability", "backend-build")]


def test_deterministic_inference_refuses_trtllm_mha():
    a = sgl(LLAMA, "B200", attention_backend="trtllm_mha", enable_deterministic_inference=True)
    assert a.status == "rejected"
    assert [(v.rule, v.outcome) for v in a.violations if v.outcome] == [("sglang.deterministic", "startup")]
    b = sgl(LLAMA, "B200", enable_deterministic_inference=True)
    assert b.ok and b.engine_phases["decode"].name == "flashinfer" and b.backends() == ("fa2", "fa2")


def test_deterministic_deepseek_needs_a_radix_supported_backend():
    # The DeepSeek override (trtllm_mla on 10.x) runs before deterministic inference, which then refuses it.
    a = sgl(DSV3, "B200", architecture="DeepseekV3ForCausalLM", enable_deterministic_inference=True)
    assert [(v.rule, v.backend) for v in a.violations if v.outcome] == [("sglang.deterministic", "trtllm_mla")]
    ok = sgl(DSV3, "B200", architecture="DeepseekV3ForCausalLM", attention_backend="triton", enable_deterministic_inference=True)
    assert not [v for v in ok.violations if v.outcome] and ok.engine_phases["decode"].name == "triton"
    b = sgl(DSV3, "H100", architecture="DeepseekV3ForCausalLM", attention_backend="flashinfer",
            enable_deterministic_inference=True)
    assert [(v.rule, v.outcome) for v in b.violations if v.outcome] == [("sglang.deterministic", "startup")]


def test_deepseek_on_b200_runs_trtllm_mla():
    a = sgl(DSV3, "B200", architecture="DeepseekV3ForCausalLM")
    assert {eb.name for eb in a.engine_phases.values()} == {"trtllm_mla"}
    assert a.ok and a.backends() == ("trtllm-ragged", "trtllm-gen-mla")
    assert a.plan.kv_cache.page_size == _forced_page("sglang.trtllm-mla-page")


def test_trtllm_mha_page_128_needs_gqa_at_backend_build():
    mha = LLAMA.replace(num_kv_heads=32)
    a = sgl(mha, "B200", page_size=128)
    assert [(v.rule, v.outcome) for v in a.violations] == [("sglang.trtllm-mha-page128", "backend-build")]
    assert sgl(LLAMA, "B200", page_size=128).ok


def test_flashinfer_names_and_unknown_kv_dtypes_are_refused_not_guessed():
    a = policy.plan_for(LLAMA.replace(attention_backend="fa2"), simulated_node("H100"), engine="sglang")
    assert a.status == "rejected" and [v.rule for v in a.violations] == ["sglang.backend-names"]
    b = policy.plan_for(LLAMA.replace(kv_cache_dtype="fp16"), simulated_node("H100"), engine="sglang")
    # SGLang has no "fp16" KV name; the kernels refuse an fp16 cache under a bf16 model too (kv.query-dtype)
    assert [v.rule for v in b.violations] == ["sglang.kv-names", "kv.query-dtype", "kv.query-dtype"]


def test_suggestions_are_resolved_by_sglangs_rules():
    a = sgl(LLAMA, "H100", kv_cache_dtype="nvfp4")
    assert a.status == "rejected" and {s.value for s in a.suggestions if s.field == "kv_cache_dtype"} == {"auto", "fp8", "fp8_e5m2"}


def test_plan_engine_string_uses_the_flags_the_config_implies():
    a = policy.plan_for(LLAMA, simulated_node("B200"), engine="sglang")
    b = sgl(LLAMA, "B200")
    assert a.backends() == b.backends() and a.engine_backend == b.engine_backend


def _launch(*argv, device):
    from attnplan.lines import plan_launch
    from attnplan.sglang.launch import parse_launch_line

    return plan_launch(parse_launch_line(list(argv)), simulated_node(device))


def test_launch_server_line_pasted_whole(capsys):
    rc = cli_main(["sglang", "launch_server", "python", "-m", "sglang.launch_server", "--model-path",
                   str(ROOT / "examples/llama-3.1-8b.json"), "--tp-size", "2", "--device", "B200", "--json", "--no-trace"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["sglang"]["tp_size"] == 2 and out["ranks"] == 2
    assert out["per_rank"]["engine_phases"]["decode"]["name"] == "trtllm_mha"
    assert out["per_rank"]["coercions"][0]["rule"] == "sglang.trtllm-mha-page"
    assert out["per_rank"]["config"]["num_qo_heads"] == 16


@pytest.mark.parametrize("argv,field", [
    (["--model-path", "examples/llama-3.1-8b.json", "--enable-lora"], "--enable-lora"),
    (["--model-path", "examples/llama-3.1-8b.json", "--attention-backend", "flash"], "attention_backend"),
    (["--model-path", "examples/llama-3.1-8b.json", "--kv-cache-dtype", "mxfp8"], "kv_cache_dtype"),
    (["--tp-size", "2"], "model_path"),
])
def test_launch_server_bad_input_is_exit_2_one_line(capsys, argv, field):
    rc = cli_main(["sglang", "launch_server", *argv, "--device", "H100"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and field in err


def test_native_tables_name_only_rules_that_exist(tmp_path):
    import dataclasses

    spec = RS.engines["sglang"]
    rows = [dict(r) for r in spec.native["pipeline"]]
    i = next(i for i, r in enumerate(rows) if r["rule"] == "sglang.trtllm-mha-page")
    rows[i] = {**rows[i], "rule": "sglang.nope"}
    bad = spec.model_copy(update={"native": {**spec.native, "pipeline": rows}})
    rs = dataclasses.replace(RS, engines={**RS.engines, "sglang": bad})
    with pytest.raises(RulePackError, match="sglang.nope"):
        native(rs)


def test_a_resolver_rule_needs_an_engine_with_a_resolver(tmp_path):
    from attnplan.rules import BACKENDS_FILE, pack_files
    from attnplan.policy.rulepack import load_ruleset

    p = tmp_path / "x.yaml"
    p.write_text("pack: x\nrules:\n  - {id: x.y, title: t, reason: r, source: s, layer: engine, applied_by: resolver, "
                 "verified: {source_only: s}}\n")
    with pytest.raises(RulePackError, match="resolver"):
        load_ruleset([*pack_files(ROOT / "attnplan/rules/packs"), p], BACKENDS_FILE)


def _sglang_src() -> Path:
    from attnplan.oracle.sglang import SRC

    return SRC


@pytest.mark.skipif(not (_sglang_src() / "arg_groups").is_dir(),
                    reason="SGLang 0.5.23 source not here (set ATTNPLAN_SGLANG_SRC to an extracted wheel's sglang/srt)")
def test_oracle_agrees_with_sglangs_own_functions_on_a_seeded_sample():
    from attnplan.oracle.sglang import compare

    rep = compare(sample=6000, seed=7)
    assert rep["disagreements"] == []
    assert all(v["of"] > 0 and v["agree"] == v["of"] for v in rep["agreement"].values())
    assert rep["agreement"]["refused"]["of"] + rep["excepted"] == 6000


def test_engine_sglang_on_rest_plan_and_preflight(capsys):
    from fastapi.testclient import TestClient

    from attnplan.rest.app import create_app

    body = {"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}, "node": {"device": "B200"},
            "engine": "sglang==0.5.23"}
    r = TestClient(create_app(node=simulated_node("H100"))).post("/v1/plan", json=body)
    assert r.status_code == 200 and r.json()["engine"] == {"name": "sglang", "version": "0.5.23"}
    assert r.json()["engine_phases"]["prefill"]["name"] == "trtllm_mha" and r.json()["coercions"][0]["runs"] == 64
    rc = cli_main(["preflight", "--simulate", "B200=1,H100=1", "--model-config", str(ROOT / "examples/llama-3.1-8b.json"),
                   "--engine", "sglang", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and "sglang" in json.dumps(out)

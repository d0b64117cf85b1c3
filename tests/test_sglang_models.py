"""Issue 39 / issue 40 class 8b: SGLang 0.5.23's model overrides, its startup refusals and its flashinfer
prefill, each against the SGLang function that decides it (named per test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan import policy
from attnplan.model import plan_model
from attnplan.policy import simulated_node
from attnplan.policy.engines import EngineSpec
from attnplan.sglang import SglangEngine, SglangFlags
from attnplan.sglang.flags import request_for_model
from attnplan.lines import plan_launch
from attnplan.sglang.launch import parse_launch_line

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "models"
DSV3 = json.loads((ROOT / "examples" / "deepseek-v3.json").read_text())
QWEN3_NEXT = json.loads((MODELS / "qwen3-next-80b-a3b-instruct.json").read_text())
FALCON_H1 = json.loads((MODELS / "falcon-h1-7b-instruct.json").read_text())
LLAMA4 = json.loads((MODELS / "llama-4-scout-17b-16e-instruct.json").read_text())
LLAMA = policy.make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8})


def model_plan(raw, device, flags=None, **over):
    """plan_model under SGLang as plan --model-config will run it once the request carries the model
    (request_for_model: the architecture read from config.json)."""
    spec = EngineSpec("sglang", None, request_for_model(SglangEngine(flags) if flags else None, raw))
    return plan_model(raw, simulated_node(device), engine=spec, overrides=over or None)


def phases(a):
    return {ph: eb.name for ph, eb in a.engine_phases.items()}


def sgl(config, device, **flags):
    return policy.plan_for(config, simulated_node(device), engine=SglangEngine(SglangFlags(**flags)))


# -- the request carries the model (issue 39 class 1; issue 40 class 8b) ----------------------------------------
def test_request_for_model_reads_the_architecture_and_keeps_the_callers_flags():
    assert request_for_model(None, DSV3).flags.architecture == "DeepseekV3ForCausalLM"
    mine = SglangEngine(SglangFlags(attention_backend="flashinfer"))
    got = request_for_model(mine, DSV3)
    assert got.flags.attention_backend == "flashinfer" and got.flags.architecture == "DeepseekV3ForCausalLM"
    named = SglangEngine(SglangFlags(architecture="LlamaForCausalLM"))
    assert request_for_model(named, DSV3) is named
    assert request_for_model(None, {}).flags.architecture is None


def test_deepseek_v3_fp8_on_b200_runs_trtllm_mla():
    # model_overrides/deepseek_v2.py _deepseek_family_overrides: trtllm_mla on SM100, which takes fp8_e4m3
    # (_mla_kv_cache_dtype_checks); without the architecture the plan was flashinfer's fa2-mla, refused for fp8.
    m = model_plan(DSV3, "B200", kv_cache_dtype="fp8_e4m3")
    a = m.attention_groups[0].answer
    assert m.ok and phases(a) == {"prefill": "trtllm_mla", "decode": "trtllm_mla"}
    assert a.backends() == ("trtllm-ragged", "trtllm-gen-mla") and a.plan.kv_cache.page_size == 64


# -- model overrides (issue 39 class 2) ---------------------------------------------------------------------------
def test_qwen3_next_on_b200_defaults_to_triton_at_page_1():
    # model_overrides/qwen3_5.py _qwen3_5_hybrid_overrides: triton, page 1 (no speculation)
    a = model_plan(QWEN3_NEXT, "B200").attention_groups
    a = next(g.answer for g in a if g.answer is not None)
    assert phases(a) == {"prefill": "triton", "decode": "triton"} and a.plan.kv_cache.page_size == 1
    # ... and the declaration is the last writer over --page-size
    b = sgl(LLAMA.replace(page_size=16), "B200", architecture="Qwen3NextForCausalLM")
    assert [(c.field, c.given, c.runs, c.rule) for c in b.coercions] == [("page_size", 16, 1, "sglang.qwen3-5-hybrid-backends")]


def test_qwen3_5_with_speculation_on_b200_runs_trtllm_mha_at_page_64():
    a = sgl(LLAMA, "B200", architecture="Qwen3_5ForConditionalGeneration", speculative_algorithm="EAGLE",
            speculative_eagle_topk=1, speculative_num_steps=3)
    assert phases(a) == {"prefill": "trtllm_mha", "decode": "trtllm_mha"} and a.plan.kv_cache.page_size == 64
    # --attention-backend given: the override does not run (split flags alone do not stop it)
    b = sgl(LLAMA, "B200", architecture="Qwen3NextForCausalLM", decode_attention_backend="flashinfer")
    assert phases(b) == {"prefill": "triton", "decode": "flashinfer"}
    # off SM100 the override declares nothing: SGLang's default (fa3 on H100)
    assert phases(sgl(LLAMA, "H100", architecture="Qwen3NextForCausalLM"))["prefill"] == "fa3"


def test_falcon_h1_on_b200_defaults_to_triton():
    # model_overrides/falcon_h1.py _falcon_h1_jet_overrides
    groups = model_plan(FALCON_H1, "B200").attention_groups
    a = next(g.answer for g in groups if g.answer is not None)
    assert phases(a) == {"prefill": "triton", "decode": "triton"}
    assert phases(sgl(LLAMA, "B200", architecture="LlamaForCausalLM"))["prefill"] == "trtllm_mha"


def test_llama4_default_and_its_base_backend_assert():
    # model_overrides/llama4.py _llama4_overrides; model_hook.py asserts the base backend
    a = sgl(LLAMA, "H100", architecture="Llama4ForCausalLM")
    assert phases(a) == {"prefill": "fa3", "decode": "fa3"}
    r = sgl(LLAMA, "B200", architecture="Llama4ForCausalLM", attention_backend="flashinfer")
    v = [x for x in r.violations if x.rule == "sglang.llama4-backends"]
    assert not r.ok and v and v[0].outcome == "startup"
    # the split flags alone pass: the override fills the base backend, which the assert reads
    s = sgl(LLAMA, "B200", architecture="Llama4ForCausalLM", prefill_attention_backend="flashinfer",
            decode_attention_backend="flashinfer")
    assert s.ok and phases(s) == {"prefill": "flashinfer", "decode": "flashinfer"}
    groups = model_plan(LLAMA4, "B200", SglangFlags(attention_backend="flashinfer")).attention_groups
    assert any(v.rule == "sglang.llama4-backends" for g in groups if g.answer for v in g.answer.violations)


def test_hybrid_gdn_on_sm120_builds_with_triton_trtllm_mha_or_flashinfer_only():
    # attention_registry.py attn_backend_wrapper: fa4 is allowed on SM100, not on SM120
    r = sgl(LLAMA, "RTX PRO 6000", architecture="Qwen3NextForCausalLM", attention_backend="fa4")
    v = [x for x in r.violations if x.rule == "sglang.hybrid-gdn-backends"]
    assert v and v[0].outcome == "backend-build"
    assert not any(x.rule == "sglang.hybrid-gdn-backends"
                   for x in sgl(LLAMA, "B200", architecture="Qwen3NextForCausalLM", attention_backend="fa4").violations)
    assert not any(x.rule == "sglang.hybrid-gdn-backends"
                   for x in sgl(LLAMA, "RTX PRO 6000", architecture="LlamaForCausalLM", attention_backend="fa4").violations)


# -- startup refusals (issue 39 class 3) --------------------------------------------------------------------------
def test_trtllm_mha_refuses_eagle_topk_above_one_including_llamas_automatic_four():
    # speculative_hook.py _handle_eagle_family, _auto_choose_speculative_params: (5, 4, 8) for Llama
    spec = dict(attention_backend="trtllm_mha", speculative_algorithm="EAGLE")
    r = sgl(LLAMA, "B200", architecture="LlamaForCausalLM", **spec)
    v = [x for x in r.violations if x.rule == "sglang.eagle-topk-trtllm-mha"]
    assert not r.ok and v and v[0].outcome == "startup" and "4" in v[0].message
    # another model's automatic top-k is 1; an explicit top-k 1 with num-steps passes too
    assert not any(x.rule.startswith("sglang.eagle") for x in sgl(LLAMA, "B200", architecture="Qwen3ForCausalLM", **spec).violations)
    ok = sgl(LLAMA, "B200", architecture="LlamaForCausalLM", speculative_eagle_topk=1, speculative_num_steps=3, **spec)
    assert not any(x.rule.startswith("sglang.eagle") for x in ok.violations)
    four = sgl(LLAMA, "H100", speculative_eagle_topk=4, speculative_num_steps=3, **spec)
    assert any(x.rule == "sglang.eagle-topk-trtllm-mha" for x in four.violations)


def test_launch_line_llama_eagle_on_trtllm_mha_is_refused(tmp_path):
    line = parse_launch_line(["--model-path", str(ROOT / "examples" / "llama-3.1-8b.json"), "--attention-backend",
                              "trtllm_mha", "--speculative-algorithm", "EAGLE",
                              "--speculative-draft-model-path", "draft"])
    la = plan_launch(line, simulated_node("B200"))
    assert not la.ok and any(v.rule == "sglang.eagle-topk-trtllm-mha" for v in la.answer.violations)
    steps = parse_launch_line(["--model-path", str(ROOT / "examples" / "llama-3.1-8b.json"), "--attention-backend",
                               "trtllm_mha", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                               "--speculative-eagle-topk", "1"])
    assert steps.flags.speculative_num_steps == 3
    assert not any(v.rule.startswith("sglang.eagle") for v in plan_launch(steps, simulated_node("B200")).answer.violations)


MLA = policy.make_config({"num_qo_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                          "v_head_dim": 128})


def test_cutedsl_mla_is_decode_only_sm100_only_and_fills_prefill_with_trtllm_mla():
    # overrides.py _cutedsl_prefill_backend_fill
    a = sgl(MLA, "B200", decode_attention_backend="cutedsl_mla")
    assert a.ok and phases(a) == {"prefill": "trtllm_mla", "decode": "cutedsl_mla"}
    pre = sgl(MLA, "B200", prefill_attention_backend="cutedsl_mla", decode_attention_backend="cutedsl_mla")
    v = [x for x in pre.violations if x.rule == "sglang.cutedsl-mla"]
    assert v and v[0].phase == "prefill" and v[0].outcome == "startup"
    off = sgl(MLA, "H100", decode_attention_backend="cutedsl_mla")
    assert any(x.rule == "sglang.cutedsl-mla" for x in off.violations)
    e5 = sgl(MLA.replace(kv_cache_dtype="fp8_e5m2"), "B200", decode_attention_backend="cutedsl_mla")
    assert any(x.rule == "sglang.cutedsl-mla" for x in e5.violations)


# -- SGLang's flashinfer prefill (issue 39 class 4) ---------------------------------------------------------------
@pytest.mark.parametrize("device,says", [("H100", "backend='auto'"), ("B200", "backend='cutlass'")])
def test_flashinfer_prefill_says_its_ragged_wrapper(device, says):
    # flashinfer_backend.py FlashInferAttnBackend.__init__: paged prefill fa2, ragged prefill 'auto' / 'cutlass' on SM100
    a = sgl(LLAMA, device, attention_backend="flashinfer")
    pre = a.engine_phases["prefill"]
    assert a.ok and pre.runs_flashinfer and says in pre.note and a.backends()[0] == "fa2"
    assert "ragged" not in a.engine_phases["decode"].note

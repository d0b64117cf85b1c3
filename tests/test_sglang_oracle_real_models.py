"""Issue 39 item 2: SGLang's oracle reads real config.json files through SGLang's own ModelConfig code
(attnplan/oracle/sglang_models.py) and runs the model overrides, model_hook.py's asserts and the backend factories
on them; attnplan reads the same files through model/hfconfig.py. A seeded sample of model_cases() agrees per
field (backend per phase, page size, refusal and where SGLang refuses, the flags it silently replaces); attnplan's
coercion notes that differ from SGLang's code are named classes (COERCION_GAPS), counted apart."""

from __future__ import annotations

import pytest

from attnplan.oracle import sglang as o

SAMPLE, SEED = 4000, 39

pytestmark = pytest.mark.skipif(not (o.SRC / "arg_groups").is_dir(),
                                reason=f"SGLang 0.5.23's sglang/srt is not at {o.SRC} (make setup unpacks it; or set "
                                       "ATTNPLAN_SGLANG_SRC)")


def _sglang(c: o.Case) -> dict:
    return o._run_case(o._sglang(str(o.SRC)), c)


def _case(model: str, cap: int, **kw) -> o.Case:
    from attnplan.oracle.sglang_models import config_json

    d = dict(cuda="12.8", mla=False, sinks=False, asymmetric=False, attention_backend=None, prefill=None, decode=None,
             kv="auto", page=None, deterministic=False, topk=None)
    d.update(kw)
    return o.Case(capability=cap, arch=config_json(model)["architectures"][0], model=model, **d)


def test_sglangs_model_config_code_reads_the_real_files():
    from attnplan.oracle.sglang_models import sglang_model

    ds = sglang_model(str(o.SRC), "deepseek-v3")
    assert ds.is_mla and ds.model_config.kv_lora_rank == 512 and ds.model_config.get_num_kv_heads(8) == 16
    kimi = sglang_model(str(o.SRC), "kimi-k2")
    assert kimi.is_mla and kimi.architecture == "DeepseekV3ForCausalLM" and kimi.hf_config.model_type == "kimi_k2"
    oss = sglang_model(str(o.SRC), "gpt-oss-20b")
    assert oss.model_config.has_attention_sinks and oss.model_config.is_hybrid_swa and not oss.is_mla
    assert oss.hf_config.quantization_config["quant_method"] == "mxfp4"
    assert sglang_model(str(o.SRC), "qwen3-next").sglang_class == "Qwen3NextConfig"
    scout = sglang_model(str(o.SRC), "llama-4-scout")
    # Llama-4's text_config, through SGLang's get_hf_text_config; transformers refuses one field of the real file
    assert scout.model_config.attention_chunk_size == 8192 and scout.model_config.head_dim == 128
    assert "attn_temperature_tuning" in scout.reader
    gemma = sglang_model(str(o.SRC), "gemma-3-27b")
    assert gemma.model_config.head_dim == 128 and not gemma.model_config.has_attention_sinks


def test_the_model_overrides_decide_on_the_real_configs():
    # model_overrides/deepseek_v2.py: DeepSeek-V3 and Kimi-K2 (model_type kimi_k2) on B200 run trtllm_mla
    for m in ("deepseek-v3", "kimi-k2"):
        assert _sglang(_case(m, 100, mla=True))["decode"] == "trtllm_mla"
    # gpt_oss.py + model_hook.py's assert: flashinfer is refused at startup, the default on SM100 is trtllm_mha
    assert _sglang(_case("gpt-oss-120b", 100))["prefill"] == "trtllm_mha"
    refused = _sglang(_case("gpt-oss-20b", 90, attention_backend="flashinfer"))
    assert refused["refused"] and refused["refused_at"] == "startup"
    # qwen3_5.py _qwen3_5_hybrid_overrides: triton with pages of 1 on SM100 (no speculation)
    q = _sglang(_case("qwen3-next", 100))
    assert (q["prefill"], q["page_size"]) == ("triton", 1)
    # falcon_h1.py: triton on SM100; llama4.py: fa3 on SM90
    assert _sglang(_case("falcon-h1", 100))["decode"] == "triton"
    assert _sglang(_case("llama-4-scout", 90))["decode"] == "fa3"


def test_a_seeded_sample_of_the_real_models_agrees_field_by_field():
    pool = list(o.model_cases())
    assert {c.model for c in pool} >= {"deepseek-v3", "kimi-k2", "gpt-oss-120b", "qwen3-next", "falcon-h1",
                                       "llama-4-scout", "gemma-2", "gemma-3-27b", "llama-3.1-8b"}
    rep = o.compare(sample=SAMPLE, seed=SEED, pool=pool)
    assert rep["cases"] == SAMPLE and rep["disagreements"] == [], rep["disagreements"][:3]
    for f in o.FIELDS:
        v = rep["agreement"][f]
        assert v["of"] > 0 and v["agree"] == v["of"], (f, v)
    # the refusals and the backends both happen in the sample: the comparison is not of one kind of answer only
    assert 0 < rep["agreement"]["prefill"]["of"] < SAMPLE




# The four classes of coercion notes the oracle first found wrong on attnplan's side, each held to SGLang's own
# code on every case of its shape in the oracle's space (a seeded 150 of each): what SGLang silently replaces of
# what the user typed is what attnplan notes, no more, no less.
CLASSES = {
    # overrides.py _attention_backend_fa3_fp8_fallback: only a typed fa3 that a phase reads is a coercion
    "fa3 under fp8_e5m2": lambda c: c.kv == "fp8_e5m2" and "fa3" in (c.attention_backend, c.prefill, c.decode),
    # kv_cache_hook.py handle_nvfp4_prefill_kv_dequant_dtype: decode runs trtllm_mha over the typed backend
    "NVFP4 decode": lambda c: c.kv == "nvfp4" and c.attention_backend not in (None, "trtllm_mha"),
    # overrides.py _cutedsl_prefill_backend_fill: the typed cutedsl_mla's prefill runs trtllm_mla
    "cutedsl_mla prefill": lambda c: c.attention_backend == "cutedsl_mla",
    # a model override's page then a backend's constraint giving back the user's own page: no coercion
    "a page that comes back": lambda c: c.model == "qwen3-next" and c.page == 64
                                        and "trtllm_mha" in (c.attention_backend, c.prefill, c.decode),
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_fixed_coercion_class_agrees_with_sglang(name):
    import random

    pool = [c for c in (*o.cases(), *o.model_cases()) if CLASSES[name](c)]
    pool = random.Random(SEED).sample(pool, min(150, len(pool)))
    rep = o.compare(pool=pool)
    assert rep["disagreements"] == [], rep["disagreements"][:2]
    coerced = rep["agreement"]["coerced"]
    assert coerced["of"] > 0 and coerced["agree"] == coerced["of"]

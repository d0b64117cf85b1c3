"""Attention config validation (typed errors naming the field) and HF config.json parsing (SPEC §2)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from attnplan import policy
from attnplan.policy import AttentionConfig, InvalidInputError, ModelConfigError, make_config
from attnplan.model import config_from_hf, fields_from_hf, read_model_config

STD = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def bad(fields) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        make_config(fields)
    err = info.value
    assert isinstance(err, ValueError)
    return err


# -- field names and normalisation --------------------------------------------------------
def test_config_fields_are_the_spec_names():
    spec = ["head_dim", "head_dim_vo", "num_qo_heads", "num_kv_heads", "dtype", "kv_cache_dtype", "page_size",
            "sliding_window", "logits_soft_cap", "sinks", "sm_scale", "attention_chunk_size",
            "num_speculative_tokens", "kv_lora_rank",
            "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "dcp_world_size", "cascade",
            "attention_backend", "engine_attention_backend", "batch_invariant",
            # vLLM's --attention-config keys that steer its FlashInfer backend (issue 36)
            "use_trtllm_attention", "disable_flashinfer_q_quantization"]
    assert set(spec) == set(policy.CONFIG_FIELDS)


def test_sm_scale_is_the_models_own_else_head_dim():
    from attnplan.policy.plan import attention_plan

    assert attention_plan(make_config(STD)).sm_scale == pytest.approx(128 ** -0.5)
    assert attention_plan(make_config(dict(STD, sm_scale=168 ** -0.5))).sm_scale == 168 ** -0.5
    mla = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert make_config(mla).softmax_scale == pytest.approx(192 ** -0.5)
    # plan_for memoises on the config: the scale is part of the key, never conflated with the default
    node = policy.simulated_node("H100")
    assert policy.plan_for(make_config(STD), node).plan.attention.sm_scale == pytest.approx(128 ** -0.5)
    assert policy.plan_for(make_config(dict(STD, sm_scale=0.1)), node).plan.attention.sm_scale == 0.1


@pytest.mark.parametrize("fields,field", [(dict(sm_scale=0), "sm_scale"), (dict(sm_scale=-0.1), "sm_scale"),
                                          (dict(sm_scale=float("nan")), "sm_scale"), (dict(sm_scale=float("inf")), "sm_scale"),
                                          (dict(attention_chunk_size=0), "attention_chunk_size"),
                                          (dict(attention_chunk_size=True), "attention_chunk_size"),
                                          (dict(attention_chunk_size=8192, sliding_window=1024), "exclude each other")])
def test_bad_scale_and_chunk(fields, field):
    assert field in str(bad(dict(STD, **fields)))


def test_kv_dtypes_are_the_spec_set():
    assert set(policy.KV_CACHE_DTYPES) == {"auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"}


def test_defaults():
    c = make_config(dict(head_dim=128, num_qo_heads=8))
    assert c.kv_heads == 8                 # num_kv_heads defaults to num_qo_heads
    assert c.kv_cache_dtype == "auto" and c.kv_dtype == c.dtype
    assert c.page_size is None and c.attention_backend == "auto" and c.batch_invariant is None
    assert c.vo_head_dim == 128 and not c.is_mla


@pytest.mark.parametrize("given,canon", [("bfloat16", "bf16"), ("float16", "fp16"), ("BF16", "bf16"), ("half", "fp16")])
def test_dtype_aliases(given, canon):
    assert make_config(dict(STD, dtype=given)).dtype == canon


@pytest.mark.parametrize("given,kv", [("fp8", "fp8_e4m3"), ("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2"),
                                      ("nvfp4", "nvfp4"), ("auto", "bf16")])
def test_kv_dtype_normalised(given, kv):
    assert make_config(dict(STD, kv_cache_dtype=given)).kv_dtype == kv


# -- typed errors ------------------------------------------------------------------------
@pytest.mark.parametrize("typo", ["fp9", "fp8_e4m2", "nvfp8", "int8", ""])
def test_kv_dtype_typo(typo):
    err = bad(dict(STD, kv_cache_dtype=typo))
    assert err.field == "kv_cache_dtype"
    assert set(err.allowed) == set(policy.KV_CACHE_DTYPES)
    assert "kv_cache_dtype" in str(err) and "fp8_e5m2" in str(err) and "nvfp4" in str(err)


def test_dtype_typo_lists_allowed():
    err = bad(dict(STD, dtype="fp64"))
    assert err.field == "dtype"
    assert {"fp16", "bf16"} <= set(err.allowed)


def test_backend_typo_lists_allowed():
    err = bad(dict(STD, attention_backend="fa4"))
    assert err.field == "attention_backend"
    assert {"auto", "fa2", "fa3", "trtllm-gen"} <= set(err.allowed)


def test_vllm_backend_that_is_not_flashinfer_is_kept_by_name():
    # vLLM's FLASH_ATTN (any spelling) is vLLM's own backend: kept by name for the verdict, never taken as a
    # FlashInfer backend; the FlashInfer plan is then the one --attention-backend FLASHINFER runs (auto)
    c = make_config(dict(STD, attention_backend="flash-attn"))
    assert (c.engine_attention_backend, c.attention_backend) == ("FLASH_ATTN", "auto")
    err = bad(dict(STD, engine_attention_backend="fa2"))
    assert err.field == "engine_attention_backend"


@pytest.mark.parametrize("hd", [0, -1, -128])
def test_head_dim_not_positive(hd):
    err = bad(dict(STD, head_dim=hd))
    assert err.field == "head_dim"
    assert str(hd) in str(err)


@pytest.mark.parametrize("field", ["num_qo_heads", "num_kv_heads"])
@pytest.mark.parametrize("value", [8.5, "eight", "8 heads", "8", [8], {"n": 8}])
def test_non_integer_heads(field, value):
    err = bad(dict(STD, **{field: value}))
    assert err.field == field


def test_num_qo_heads_required():
    err = bad(dict(head_dim=128, num_qo_heads=None))
    assert err.field == "num_qo_heads"


def test_num_kv_heads_null_means_default():
    # num_kv_heads: null means "same as num_qo_heads", not an error
    assert make_config(dict(STD, num_kv_heads=None)).kv_heads == 32


@pytest.mark.parametrize("field", ["num_qo_heads", "num_kv_heads", "head_dim", "page_size"])
def test_booleans_are_not_integers(field):
    err = bad(dict(STD, **{field: True}))
    assert err.field == field


@pytest.mark.parametrize("field", ["num_qo_heads", "num_kv_heads", "page_size", "dcp_world_size"])
def test_zero_counts_refused(field):
    err = bad(dict(STD, **{field: 0}))
    assert err.field == field


@pytest.mark.parametrize("name", ["head_size", "num_heads", "kv_dtype", "backend"])
def test_unknown_field(name):
    err = bad(dict(STD, **{name: 1}))
    assert err.field == name
    assert "unknown" in str(err)


def test_more_kv_heads_than_query_heads():
    err = bad(dict(head_dim=128, num_qo_heads=8, num_kv_heads=16))
    assert "num_kv_heads" in str(err) and "num_qo_heads" in str(err)
    assert "16" in str(err) and "8" in str(err)


@pytest.mark.parametrize("missing", ["qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"])
def test_mla_missing_dims(missing):
    fields = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    del fields[missing]
    err = bad(fields)
    assert missing in str(err)
    assert "kv_lora_rank" in str(err) or "MLA" in str(err)


def test_mla_all_dims_missing_names_each():
    err = bad(dict(num_qo_heads=16, kv_lora_rank=512))
    for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        assert f in str(err)


def test_head_dim_required_without_mla():
    err = bad(dict(num_qo_heads=16))
    assert "head_dim" in str(err)


def test_direct_model_validation_is_a_value_error():
    with pytest.raises(ValueError):
        AttentionConfig(head_dim=128, num_qo_heads=8, kv_cache_dtype="fp9")
    with pytest.raises(ValidationError):
        AttentionConfig(head_dim=128, num_qo_heads=8, unknown_thing=1)


def test_strict_bools():
    err = bad(dict(STD, sinks="yes"))
    assert err.field == "sinks"
    err = bad(dict(STD, cascade=1))
    assert err.field == "cascade"


def test_config_is_frozen_and_hashable():
    c = make_config(STD)
    with pytest.raises(ValidationError):
        c.head_dim = 64
    assert hash(c) == hash(make_config(STD))


# -- HF config.json ----------------------------------------------------------------------
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "torch_dtype": "bfloat16"}


def write_cfg(tmp_path, data, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def test_hf_head_dim_from_hidden_size(tmp_path):
    c = config_from_hf(write_cfg(tmp_path, LLAMA))
    assert c.head_dim == 4096 // 32 == 128
    assert c.num_qo_heads == 32 and c.kv_heads == 8
    assert c.dtype == "bf16"


def test_hf_explicit_head_dim_wins_over_hidden_size():
    # Qwen3 / Gemma style: head_dim is given and differs from hidden_size // heads
    c = config_from_hf(dict(LLAMA, hidden_size=2560, head_dim=128))
    assert c.head_dim == 128


def test_hf_null_head_dim_falls_back_to_hidden_size():
    assert config_from_hf(dict(LLAMA, head_dim=None)).head_dim == 128


def test_hf_num_key_value_heads_default():
    data = {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"}
    c = config_from_hf(data)
    assert c.kv_heads == 32


def test_hf_sliding_window():
    assert config_from_hf(dict(LLAMA, sliding_window=4096)).sliding_window == 4096
    assert config_from_hf(dict(LLAMA, sliding_window=None)).sliding_window is None


def test_hf_use_sliding_window_false_means_no_window():
    # Qwen2-style configs carry a sliding_window value that is switched off
    assert config_from_hf(dict(LLAMA, sliding_window=32768, use_sliding_window=False)).sliding_window is None
    assert config_from_hf(dict(LLAMA, sliding_window=32768, use_sliding_window=True)).sliding_window == 32768


@pytest.mark.parametrize("torch_dtype,dtype", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_hf_torch_dtype(torch_dtype, dtype):
    assert config_from_hf(dict(LLAMA, torch_dtype=torch_dtype)).dtype == dtype


def test_hf_gemma2_softcap():
    gemma2 = {"model_type": "gemma2", "hidden_size": 3584, "head_dim": 256, "num_attention_heads": 16,
              "num_key_value_heads": 8, "attn_logit_softcapping": 50.0, "sliding_window": 4096}
    c = config_from_hf(gemma2)
    assert c.logits_soft_cap == 50.0
    assert c.head_dim == 256 and c.sliding_window == 4096
    # the kernel layer keeps soft-capped models off trtllm-gen (SPEC §3 trtllm.softcap) ...
    a = policy.plan_for(c, policy.simulated_node("B200"), engine="flashinfer")
    assert a.ok and a.backends() == ("fa2", "fa2")
    # ... vLLM 0.33 does not: it would drop the soft cap, so its layer refuses (issue 21)
    v = policy.plan_for(c, policy.simulated_node("B200"))
    assert not v.ok and "vllm.softcap-dropped" in {x.rule for x in v.violations}


def test_hf_softcap_null_ignored():
    assert config_from_hf(dict(LLAMA, attn_logit_softcapping=None)).logits_soft_cap is None


def test_hf_mla_when_kv_lora_rank_present():
    ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
          "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    c = config_from_hf(ds)
    assert c.is_mla and c.kv_lora_rank == 512
    assert (c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim) == (128, 64, 128)
    assert c.qk_head_dim == 192 and c.vo_head_dim == 128


def test_hf_no_mla_without_kv_lora_rank():
    c = config_from_hf(dict(LLAMA, kv_lora_rank=None, qk_rope_head_dim=64))
    assert not c.is_mla


def test_hf_sinks_for_gpt_oss():
    oss = {"model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64, "num_attention_heads": 64,
           "num_key_value_heads": 8, "sliding_window": 128}
    c = config_from_hf(oss)
    assert c.sinks is True and c.head_dim == 64
    assert config_from_hf(dict(oss, model_type="llama")).sinks is False


def test_hf_nested_text_config():
    mm = {"model_type": "gemma3", "vision_config": {"hidden_size": 1152, "num_attention_heads": 16},
          "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "head_dim": 256,
                          "num_attention_heads": 8, "num_key_value_heads": 4, "sliding_window": 1024},
          "torch_dtype": "bfloat16"}
    c = config_from_hf(mm)
    assert (c.head_dim, c.num_qo_heads, c.kv_heads, c.sliding_window) == (256, 8, 4, 1024)
    assert c.dtype == "bf16"


def test_hf_explicit_overrides_win(tmp_path):
    # head_dim given: transformers' GptOssConfig (read when installed) defaults it to 64, as vLLM reads it
    p = write_cfg(tmp_path, dict(LLAMA, sliding_window=4096, model_type="gpt_oss", head_dim=128))
    c = config_from_hf(p, head_dim=64, num_kv_heads=4, sliding_window=1024, sinks=False,
                       kv_cache_dtype="fp8", page_size=32)
    assert (c.head_dim, c.kv_heads, c.sliding_window, c.sinks) == (64, 4, 1024, False)
    assert c.kv_cache_dtype == "fp8" and c.page_size == 32
    # an override of None means "not given": the file's value stays
    assert config_from_hf(p, head_dim=None).head_dim == 128


def test_hf_directory_holding_config_json(tmp_path):
    write_cfg(tmp_path, LLAMA)
    assert config_from_hf(tmp_path).head_dim == 128
    assert read_model_config(tmp_path)["num_attention_heads"] == 32


def test_hf_fields_from_hf_is_plain_data():
    f = fields_from_hf(LLAMA)
    assert f["num_qo_heads"] == 32 and f["num_kv_heads"] == 8 and f["head_dim"] == 128


# -- HF config errors --------------------------------------------------------------------
def model_error(path_or_data) -> ModelConfigError:
    with pytest.raises(ModelConfigError) as info:
        config_from_hf(path_or_data)
    err = info.value
    assert isinstance(err, InvalidInputError) and isinstance(err, ValueError)
    return err


def test_hf_missing_file(tmp_path):
    p = tmp_path / "nope" / "config.json"
    err = model_error(p)
    assert str(p) in str(err)
    with pytest.raises(ModelConfigError):
        read_model_config(p)


def test_hf_directory_without_config_json(tmp_path):
    model_error(tmp_path)


def test_hf_unreadable_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xff\xfe\x00{ not utf-8 \x80\x81")
    err = model_error(p)
    assert str(p) in str(err)


@pytest.mark.parametrize("text", ["{", "{\"num_attention_heads\": 32,}", "not json", ""])
def test_hf_malformed_json(tmp_path, text):
    err = model_error(write_cfg(tmp_path, text))
    assert "JSON" in str(err)


@pytest.mark.parametrize("text", ["[1, 2]", "42", "\"config\"", "null"])
def test_hf_not_an_object(tmp_path, text):
    model_error(write_cfg(tmp_path, text))


def test_hf_missing_num_attention_heads():
    err = model_error({"hidden_size": 4096})
    assert "num_attention_heads" in str(err)


def test_hf_missing_head_dim_and_hidden_size():
    err = model_error({"num_attention_heads": 32})
    assert "head_dim" in str(err) and "hidden_size" in str(err)


def test_hf_hidden_size_not_divisible():
    err = model_error({"num_attention_heads": 3, "hidden_size": 128})
    assert "hidden_size" in str(err)


@pytest.mark.parametrize("missing", ["qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"])
def test_hf_mla_missing_dims(missing):
    ds = {"num_attention_heads": 16, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
          "v_head_dim": 128}
    del ds[missing]
    err = model_error(ds)
    assert missing in str(err)


@pytest.mark.parametrize("key,value", [("num_attention_heads", "32"), ("num_key_value_heads", 8.0),
                                       ("head_dim", True), ("hidden_size", [4096])])
def test_hf_wrong_types(key, value):
    err = model_error(dict(LLAMA, **{key: value}))
    assert key in str(err)


def test_hf_error_names_the_file(tmp_path):
    p = write_cfg(tmp_path, {"hidden_size": 4096})
    err = model_error(p)
    assert str(p) in str(err) and err.path == str(p)

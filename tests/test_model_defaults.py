"""Issue 40 #8: a config field a transformers config class defaults is read as that class defaults it.

vLLM reads config.json through the family's transformers config class, so a Qwen3 file without
``head_dim`` runs at Qwen3Config's 128, not hidden/heads; attnplan's own reader (no transformers, or
``use_transformers=False``: REST validation, preflight nodes) used hidden/heads. The defaults are a
table per family (model/hfconfig.py CLASS_DEFAULTS), checked here against the installed transformers.
"""

from __future__ import annotations

import pytest

from attnplan.model.hfconfig import CLASS_DEFAULTS, model_info
from attnplan.request import ModelRequest, check_request

HEADS, HIDDEN = 128, 8192  # divisible by every class's default KV heads (Qwen2: 32, DeepSeek-V3: 128)
# A file's variants: nothing left to the class but the size, and one field given as JSON null.
VARIANTS = [{}, {"use_sliding_window": True}, {"head_dim": None}, {"sliding_window": None}]


def _own(data):
    return model_info(data, use_transformers=False).fields


@pytest.mark.parametrize("variant", VARIANTS, ids=["bare", "use_sliding_window", "head_dim-null", "window-null"])
@pytest.mark.parametrize("family", sorted(CLASS_DEFAULTS) + ["gemma3"])
def test_own_reader_reads_as_the_transformers_class_does(family, variant):
    pytest.importorskip("transformers")
    data = {"model_type": family, "num_attention_heads": HEADS, "hidden_size": HIDDEN, **variant}
    if family == "gemma3":  # the multimodal config: its text_config is a Gemma3TextConfig
        data = {"model_type": "gemma3", "text_config": {"num_attention_heads": HEADS, "hidden_size": HIDDEN, **variant}}
    forced = model_info(data, use_transformers="always")
    assert _own(data) == forced.fields, (family, variant, forced.reader)


@pytest.mark.parametrize("family,expected", [
    # transformers 5.20 configuration_<family>.py class attributes (and __post_init__ derivations)
    ("qwen3", {"head_dim": 128, "num_kv_heads": 32}),                 # Qwen3Config.head_dim = 128, not 8192/128
    ("qwen3_moe", {"head_dim": HIDDEN // HEADS, "num_kv_heads": 4}),  # no head_dim attribute: vLLM derives it
    ("qwen2", {"head_dim": HIDDEN // HEADS, "num_kv_heads": 32}),
    ("gemma", {"head_dim": 256, "num_kv_heads": 16}),
    ("gemma2", {"head_dim": 256, "num_kv_heads": 4, "sliding_window": 4096, "logits_soft_cap": 50.0}),
    ("gemma3_text", {"head_dim": 256, "num_kv_heads": 4, "sliding_window": 4096}),
    ("llama", {"head_dim": HIDDEN // HEADS, "num_kv_heads": HEADS}),  # LlamaConfig derives both
    ("mistral", {"head_dim": HIDDEN // HEADS, "num_kv_heads": 8, "sliding_window": 4096}),
    ("mixtral", {"head_dim": HIDDEN // HEADS, "num_kv_heads": 8}),
    ("gpt_oss", {"head_dim": 64, "num_kv_heads": 8, "sliding_window": 128, "sinks": True}),
    ("deepseek_v3", {"num_kv_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                     "v_head_dim": 128}),
])
def test_class_defaults_without_transformers(family, expected):
    f = _own({"model_type": family, "num_attention_heads": HEADS, "hidden_size": HIDDEN})
    assert {k: f.get(k) for k in expected} == expected, f


def test_a_given_field_wins_over_the_class_default_and_null_is_not_absent():
    base = {"model_type": "qwen3", "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 5120}
    assert _own({**base, "head_dim": 64})["head_dim"] == 64
    assert _own(base)["head_dim"] == 128
    assert _own({**base, "head_dim": None})["head_dim"] == 80  # null reaches the class as None: hidden/heads
    assert _own({**base, "num_kv_heads": 4})["num_kv_heads"] == 4  # another KV spelling: no class default over it
    g2 = {"model_type": "gemma2", "num_attention_heads": 16, "num_key_value_heads": 8, "hidden_size": 3584}
    assert "logits_soft_cap" not in _own({**g2, "attn_logit_softcapping": None})
    assert "sliding_window" not in _own({"model_type": "qwen2", "num_attention_heads": 28, "num_key_value_heads": 4,
                                         "hidden_size": 3584, "sliding_window": 32768})  # use_sliding_window defaults to False


def test_rest_validation_sees_the_class_default():
    # check_request (REST's pre-plan validation) reads without transformers: a per-group override
    # conflict aside, the head size it validates is the class's 128.
    req = ModelRequest.build(model={"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 64,
                                    "num_key_value_heads": 8, "hidden_size": 5120})
    check_request(req)
    from attnplan.model import fields_from_hf

    assert fields_from_hf(req.load(), use_transformers=False)["head_dim"] == 128

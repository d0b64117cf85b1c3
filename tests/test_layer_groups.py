"""Layer groups of real models (issue 15), read from their public config.json (tests/models/).

Expected values are written from the model cards and vLLM 0.33's model code (cited at each test),
not from running the reader: layer indices, windows, chunk sizes and softmax scales.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from attnplan.policy import InvalidInputError, ModelConfigError, plan_for, simulated_node
from attnplan.model import LayerGroup, explain_groups, layer_groups, plan_model, read_layers
from attnplan.model.layers import yarn_get_mscale
from attnplan.render import compact_layers, finish, render_groups
from attnplan.render.notes import notes_text   # the reader's notes are data; render/ words them

MODELS = Path(__file__).parent / "models"


def hf(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def by_kind(groups, kind) -> list[LayerGroup]:
    return [g for g in groups if g.kind == kind]


def one(groups, kind) -> LayerGroup:
    found = by_kind(groups, kind)
    assert len(found) == 1, [g.kind for g in groups]
    return found[0]


@pytest.fixture(scope="module")
def h100():
    return simulated_node("H100")


# -- layer groups of the real configs -----------------------------------------------------
def test_gemma3_27b_five_local_one_global_scale_168():
    groups = layer_groups(hf("gemma-3-27b-it"))  # text_config of a multimodal config
    assert len(groups) == 2
    local, glob = one(groups, "sliding"), one(groups, "full")
    # transformers Gemma3TextConfig: sliding unless (i + 1) % 6 == 0 (sliding_window_pattern default 6).
    assert glob.layers == tuple(range(5, 62, 6)) and len(glob.layers) == 10
    assert local.layers == tuple(i for i in range(62) if (i + 1) % 6) and len(local.layers) == 52
    assert local.sliding_window == 1024 and glob.sliding_window is None
    for g in groups:
        assert g.sm_scale == pytest.approx(168 ** -0.5)  # query_pre_attn_scalar, not 128^-0.5
        assert (g.head_dim_qk, g.head_dim_vo, g.num_qo_heads, g.num_kv_heads) == (128, 128, 32, 16)
        assert g.logits_soft_cap is None and not g.sinks and g.rope


def test_gemma3_1b_pattern_field_and_mqa():
    groups = layer_groups(hf("gemma-3-1b-it"))
    local, glob = one(groups, "sliding"), one(groups, "full")
    assert glob.layers == (5, 11, 17, 23)
    assert len(local.layers) == 22 and local.sliding_window == 512
    assert local.sm_scale == pytest.approx(256 ** -0.5)
    assert (local.num_qo_heads, local.num_kv_heads, local.head_dim_qk) == (4, 1, 256)


def test_gemma3_newer_config_layer_types_win_over_the_pattern():
    data = hf("gemma-3-1b-it")
    data["layer_types"] = ["full_attention" if i < 2 else "sliding_attention" for i in range(26)]
    groups = layer_groups(data)
    assert one(groups, "full").layers == (0, 1)
    assert one(groups, "sliding").layers == tuple(range(2, 26))


def test_gemma2_9b_alternates_with_soft_cap():
    groups = layer_groups(hf("gemma-2-9b"))
    local, glob = one(groups, "sliding"), one(groups, "full")
    # transformers Gemma2Config.layer_types: even layers slide; vllm gemma2.py reads them.
    assert local.layers == tuple(range(0, 42, 2)) and glob.layers == tuple(range(1, 42, 2))
    assert local.sliding_window == 4096
    for g in groups:
        assert g.logits_soft_cap == 50.0
        assert g.sm_scale == pytest.approx(256 ** -0.5)


def test_gpt_oss_20b_alternating_window_128_with_sinks_everywhere():
    m = read_layers(hf("gpt-oss-20b"))
    local, glob = one(m.groups, "sliding"), one(m.groups, "full")
    assert local.layers == tuple(range(0, 24, 2)) and glob.layers == tuple(range(1, 24, 2))
    assert local.sliding_window == 128
    assert all(g.sinks for g in m.groups)
    assert local.sm_scale == pytest.approx(64 ** -0.5)
    assert (local.num_qo_heads, local.num_kv_heads) == (64, 8)
    ignored = next(n for n in notes_text(m.notes_says) if n.startswith("ignored"))
    assert "quantization_config" in ignored and "num_local_experts" in ignored


def test_gpt_oss_layer_types_that_contradict_vllm_follow_vllm():
    data = hf("gpt-oss-20b")
    data["layer_types"] = list(reversed(data["layer_types"]))  # odd layers sliding
    m = read_layers(data)
    assert one(m.groups, "sliding").layers == tuple(range(0, 24, 2))
    assert any("disagrees" in n for n in notes_text(m.notes_says))


def test_llama4_scout_chunked_local_and_nope_layers():
    m = read_layers(hf("llama-4-scout-17b-16e-instruct"))
    chunked, glob = one(m.groups, "chunked_local"), one(m.groups, "full")
    # no_rope_layers [] -> every 4th layer NoPE (no_rope_layer_interval 4); llama4.py: NoPE layers
    # run plain attention, RoPE layers chunked local attention.
    assert glob.layers == tuple(range(3, 48, 4)) and not glob.rope and glob.chunk_size is None
    assert len(chunked.layers) == 36 and chunked.rope and chunked.chunk_size == 8192
    assert chunked.sm_scale == glob.sm_scale == pytest.approx(128 ** -0.5)
    assert any("attn_temperature_tuning" in n for n in notes_text(m.notes_says))


def test_llama4_explicit_no_rope_layers():
    data = hf("llama-4-scout-17b-16e-instruct")
    data["text_config"]["no_rope_layers"] = [0, 1] * 24
    groups = layer_groups(data)
    assert one(groups, "full").layers == tuple(range(0, 48, 2))


def test_deepseek_v3_mla_scale_carries_yarn_mscale_squared():
    g, = layer_groups(hf("deepseek-v3"))
    assert g.kind == "full" and g.layers == tuple(range(61))
    assert g.mla == {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    assert (g.head_dim_qk, g.head_dim_vo) == (192, 128)
    # deepseek_v2.py: scaling = qk_head_dim^-0.5 * mscale^2, mscale = 0.1 * mscale_all_dim * ln(factor) + 1.
    mscale = 0.1 * 1.0 * math.log(40) + 1.0
    assert g.sm_scale == pytest.approx(192 ** -0.5 * mscale ** 2)
    assert g.sm_scale == pytest.approx(0.135234, rel=1e-5)


def test_deepseek_scale_without_mscale_all_dim_or_with_llama_scaling():
    data = hf("deepseek-v3")
    del data["rope_scaling"]["mscale_all_dim"]
    assert layer_groups(data)[0].sm_scale == pytest.approx(192 ** -0.5)  # yarn_get_mscale(40, 0) = 1
    data = hf("deepseek-v3")
    data["rope_scaling"]["attention_factor"] = 1.0  # deepseek_llama_scaling: no mscale
    assert layer_groups(data)[0].sm_scale == pytest.approx(192 ** -0.5)
    assert yarn_get_mscale(1.0, 1.0) == 1.0


def test_qwen3_next_three_gated_deltanet_per_full_attention():
    groups = layer_groups(hf("qwen3-next-80b-a3b-instruct"))
    lin, full = one(groups, "linear_attention"), one(groups, "full")
    assert full.layers == tuple(range(3, 48, 4)) and len(lin.layers) == 36
    assert not lin.is_attention and lin.sm_scale is None and lin.num_qo_heads is None
    # mamba_utils.py gated_delta_net_state_shape: conv (k-1, 2*dk*nk + dv*nv), temporal (nv, dv, dk).
    assert lin.recurrent.shapes == ((3, 128 * 16 * 2 + 128 * 32), (32, 128, 128))
    assert (full.num_qo_heads, full.num_kv_heads, full.head_dim_qk) == (16, 2, 256)
    assert full.sm_scale == pytest.approx(256 ** -0.5)


def test_falcon_h1_attention_and_mamba2_in_every_layer():
    groups = layer_groups(hf("falcon-h1-7b-instruct"))
    attn, mamba = one(groups, "full"), one(groups, "mamba")
    assert attn.layers == mamba.layers == tuple(range(44))
    assert (attn.num_qo_heads, attn.num_kv_heads, attn.head_dim_qk) == (12, 2, 128)
    # mamba2_state_shape: conv (d_conv-1, d_ssm + 2*groups*d_state), temporal (heads, d_head, d_state).
    assert mamba.recurrent.shapes == ((3, 3072 + 2 * 256), (24, 128, 256))


def test_jamba_attention_every_eighth_layer_from_four():
    data = {"model_type": "jamba", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "hidden_size": 4096, "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16,
            "mamba_d_conv": 4, "mamba_expand": 2}
    groups = layer_groups(data)
    assert one(groups, "full").layers == (4, 12, 20, 28)
    assert one(groups, "mamba").recurrent.shapes == ((3, 8192), (8192, 16))


def test_uniform_model_is_one_group():
    data = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "hidden_size": 4096, "rope_theta": 500000.0}
    g, = layer_groups(data)
    assert g.kind == "full" and g.layers == tuple(range(32)) and g.head_dim_qk == 128


# -- bad input: one line, named -----------------------------------------------------------
def _bad(data, match):
    with pytest.raises(ModelConfigError, match=match) as exc:
        read_layers(data)
    assert "\n" not in str(exc.value)


def test_layer_types_of_the_wrong_length():
    data = hf("gpt-oss-20b")
    data["layer_types"] = data["layer_types"][:-1]
    _bad(data, "layer_types has 23 entries but num_hidden_layers is 24")


def test_unknown_layer_type():
    data = hf("gpt-oss-20b")
    data["layer_types"][3] = "global_attention"
    _bad(data, "unknown layer type 'global_attention'")


@pytest.mark.parametrize("key,value", [("sliding_window_pattern", 0), ("sliding_window_pattern", -6),
                                       ("sliding_window_pattern", 2.5), ("sliding_window", 0),
                                       ("sliding_window", -1024), ("sliding_window", 1024.5), ("sliding_window", "1024")])
def test_impossible_patterns_and_windows(key, value):
    data = hf("gemma-3-1b-it")
    data[key] = value
    _bad(data, key)


@pytest.mark.parametrize("value", [0, -8192, 8192.0, True])
def test_impossible_chunk_sizes(value):
    data = hf("llama-4-scout-17b-16e-instruct")
    data["text_config"]["attention_chunk_size"] = value
    _bad(data, "attention_chunk_size")


def test_pattern_intervals_of_zero_and_wrong_no_rope_length():
    data = hf("qwen3-next-80b-a3b-instruct")
    data["full_attention_interval"] = 0
    _bad(data, "full_attention_interval")
    data = hf("llama-4-scout-17b-16e-instruct")
    data["text_config"]["no_rope_layers"] = [1, 1, 1, 0]
    _bad(data, "no_rope_layers must be 48 entries")


def test_sliding_layers_without_a_window_and_missing_layer_count():
    data = hf("gpt-oss-20b")
    data["sliding_window"] = None
    _bad(data, "sliding layers need sliding_window")
    _bad({"model_type": "llama", "num_attention_heads": 32, "hidden_size": 4096}, "missing num_hidden_layers")


def test_omitted_fields_take_the_config_class_defaults():
    # google/gemma-3-4b-it's text_config names no heads: Gemma3TextConfig's 8/4 heads of 256 apply.
    data = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                                    "num_hidden_layers": 34, "sliding_window": 1024}}
    groups = layer_groups(data)
    local = one(groups, "sliding")
    assert (local.num_qo_heads, local.num_kv_heads, local.head_dim_qk) == (8, 4, 256)
    assert local.sm_scale == pytest.approx(256 ** -0.5) and one(groups, "full").layers == (5, 11, 17, 23, 29)
    a = plan_model(data, simulated_node("H100"))
    assert [g.config.num_qo_heads for g in a.layer_groups] == [8, 8]


def test_per_group_fields_cannot_be_overridden_for_the_model(h100):
    with pytest.raises(InvalidInputError, match="sliding_window: set per layer group"):
        plan_model(hf("gemma-3-1b-it"), h100, overrides={"sliding_window": 4096})


# -- planning per group -------------------------------------------------------------------
def test_gemma3_plan_applies_each_groups_window_and_scale(h100):
    a = plan_model(hf("gemma-3-27b-it"), h100)
    assert a.ok and not a.uniform
    local, glob = one(a.layer_groups, "sliding"), one(a.layer_groups, "full")
    assert local.attention.window_left == 1023 and glob.attention.window_left == -1
    assert local.attention.sm_scale == glob.attention.sm_scale == pytest.approx(168 ** -0.5)
    assert local.config.sliding_window == 1024 and glob.config.sliding_window is None
    assert local.prefill is not None and local.decode is not None
    # One KV block size for all groups; vLLM's groups: 10 layers each, the 52 local layers in 6
    # groups (layers[i::6]) padded to 10 (kv_cache_planning.py _get_kv_cache_groups_uniform_page_size).
    kv = a.kv_cache_groups
    assert local.kv_cache.page_size == glob.kv_cache.page_size == kv.kernel_page_size == kv.block_size
    assert kv.layers_per_group == 10
    assert [g.kind for g in kv.groups].count("sliding") == 6 and [g.kind for g in kv.groups].count("full") == 1
    assert sum(g.padding_layers for g in kv.groups) == 8
    assert sorted(x for g in kv.groups for x in g.layers) == list(range(62))
    assert kv.page_bytes == kv.block_size * 16 * (128 + 128) * 2  # bf16 K and V of 16 KV heads


def test_a_group_can_be_refused_while_another_passes(h100):
    data = hf("llama-4-scout-17b-16e-instruct")
    data["text_config"]["attention_chunk_size"] = 8200  # no KV block size of 16..64 divides it
    a = plan_model(data, h100)
    chunked, glob = one(a.layer_groups, "chunked_local"), one(a.layer_groups, "full")
    assert glob.status == "ok" and chunked.status == "rejected" and a.status == "rejected"
    v, = chunked.violations
    assert v.rule == "chunked-local.block-size" and v.observed == a.kv_cache_groups.block_size
    assert chunked.prefill is None and glob.prefill is not None
    assert "REJECTED" in render_groups(a) and "chunked-local.block-size" in render_groups(a)


def test_chunked_local_planned_as_virtual_requests(h100):
    a = plan_model(hf("llama-4-scout-17b-16e-instruct"), h100)
    chunked = one(a.layer_groups, "chunked_local")
    assert a.ok and chunked.chunked_local.chunk_size == 8192 and chunked.chunked_local.virtual_requests
    assert chunked.attention.window_left == -1  # each chunk is a plain causal request
    assert 8192 % a.kv_cache_groups.block_size == 0


def test_gpt_oss_every_group_carries_sinks_and_its_window(h100):
    a = plan_model(hf("gpt-oss-20b"), simulated_node("B200"))
    local, glob = one(a.layer_groups, "sliding"), one(a.layer_groups, "full")
    assert local.config.sinks and glob.config.sinks
    assert local.config.sliding_window == 128 and glob.config.sliding_window is None
    for g in (local, glob):
        if g.status == "ok":
            assert g.attention.sinks and g.attention.sm_scale == pytest.approx(0.125)
    assert a.ok == all(g.status == "ok" for g in (local, glob))


def _hybrid_block(state_bytes: int, token_bytes: int, page: int) -> int:
    # platforms/interface.py _align_hybrid_block_size with FlashInfer's smallest kernel block 16.
    align = max(16, page)
    block = align * -(-state_bytes // (align * token_bytes))
    return max(page, 16 * -(-block // 16))


def test_qwen3_next_hybrid_kv_cache_block_holds_the_deltanet_state(h100):
    a = finish(plan_model(hf("qwen3-next-80b-a3b-instruct"), h100))   # its notes written by render/
    lin, full = one(a.layer_groups, "linear_attention"), one(a.layer_groups, "full")
    assert lin.status == "not_served" and lin.prefill is None and "not served by FlashInfer" in lin.notes[0]
    assert full.status == "ok" and a.ok
    kv = a.kv_cache_groups
    state = (3 * 8192 + 32 * 128 * 128) * 2  # bf16 conv + temporal state
    token = 2 * 2 * 256 * 2  # K and V, 2 KV heads of 256, bf16
    assert kv.recurrent_state_bytes == state
    assert kv.block_size == _hybrid_block(state, token, kv.kernel_page_size) == 544
    assert kv.page_bytes == 544 * token
    assert full.kv_cache.page_size == kv.kernel_page_size  # the kernels still see small pages
    assert [g.kind for g in kv.groups] == ["linear_attention"] * 3 + ["full"]


def test_falcon_h1_hybrid_block(h100):
    a = plan_model(hf("falcon-h1-7b-instruct"), h100)
    kv = a.kv_cache_groups
    state = (3 * 3584 + 24 * 128 * 256) * 2
    assert kv.block_size == _hybrid_block(state, 2 * 2 * 128 * 2, kv.kernel_page_size) == 1568
    assert len(kv.groups) == 2 and kv.layers_per_group == 44


def test_uniform_model_keeps_todays_top_level_fields(h100):
    data = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "hidden_size": 4096, "torch_dtype": "bfloat16"}
    a = plan_model(data, h100)
    assert a.uniform
    today = plan_for(dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, dtype="bf16", sinks=False), h100)
    js = a.to_json(trace=False)
    ref = today.to_json(trace=False)
    for key in ("status", "config", "violations", "fallbacks", "engine"):
        assert js[key] == ref[key], key
    # vLLM writes head_dim**-0.5 (llama.py); plan.py 1/sqrt(head_dim): equal to the last bit or so.
    assert js["plan"]["attention"].pop("sm_scale") == pytest.approx(ref["plan"]["attention"].pop("sm_scale"), rel=1e-15)
    assert js["plan"] == ref["plan"]
    assert len(js["layer_groups"]) == 1 and js["layer_groups"][0]["layers"] == list(range(32))
    assert js["layer_groups"][0]["prefill"] == ref["plan"]["prefill"]
    assert "answer" not in js["layer_groups"][0]


def test_deepseek_uniform_plan_carries_the_yarn_scale(h100):
    a = plan_model(hf("deepseek-v3"), h100)
    assert a.uniform
    one_answer = a.answer()
    if one_answer.ok:
        assert one_answer.plan.attention.sm_scale == pytest.approx(0.135234, rel=1e-5)
        assert a.kv_cache_groups.page_bytes == a.kv_cache_groups.block_size * (512 + 64) * 2


def test_layered_json_names_every_group(h100):
    js = plan_model(MODELS / "gemma-3-1b-it.json", h100).to_json()  # a path reads the file
    json.dumps(js)
    assert js["status"] == "ok" and js["num_layers"] == 26
    kinds = {g["kind"]: g for g in js["layer_groups"]}
    assert kinds["full"]["layers"] == [5, 11, 17, 23]
    assert kinds["sliding"]["attention"]["window_left"] == 511
    assert {"prefill", "decode", "violations", "sm_scale"} <= set(kinds["full"])


# -- renderer -----------------------------------------------------------------------------
def test_compact_layers():
    assert compact_layers(range(62), 62) == "all 62"
    assert compact_layers(range(5, 62, 6), 62) == "5..59 every 6"
    assert compact_layers([i for i in range(62) if (i + 1) % 6], 62) == "all but 5..59 every 6"
    assert compact_layers([0, 1, 2, 7, 9]) == "0-2,7,9"


def test_render_groups_table(h100):
    text = render_groups(plan_model(hf("qwen3-next-80b-a3b-instruct"), h100))
    assert "3..47 every 4" in text and "not FlashInfer" in text and "block 544 tokens" in text
    text = render_groups(plan_model(hf("gemma-3-27b-it"), h100))
    assert "window 1024" in text and f"{168 ** -0.5:.6g}" in text


def test_explain_shows_each_groups_verdict(h100):
    from attnplan.render.groups import render_groups_explain

    data = hf("llama-4-scout-17b-16e-instruct")
    data["text_config"]["attention_chunk_size"] = 8200
    a = plan_model(data, h100)
    text = render_groups_explain(a, explain_groups(a))
    assert "== layers 3..47 every 4 (full): OK" in text
    assert "== layers all but 3..47 every 4 (chunked_local, chunk 8200): REJECTED" in text
    assert text.count("selected:") == 2


def test_the_public_plan_model_probes_this_machine_when_no_node_is_given(monkeypatch):
    # attnplan.plan_model(path) - what the GPU layer-group test calls - handed None to the policy,
    # which plans declared facts only: every call without a node failed (found on the H100, 2026-11-26).
    import attnplan
    import attnplan.node.probe as probe

    probed = []
    monkeypatch.setattr(probe, "local_node", lambda: probed.append(1) or simulated_node("H100"))
    m = attnplan.plan_model(hf("gemma-3-27b-it"), overrides={"attention_backend": "fa2"}, engine="flashinfer")
    assert probed == [1] and m.ok
    assert m == attnplan.plan_model(hf("gemma-3-27b-it"), simulated_node("H100"), overrides={"attention_backend": "fa2"},
                                    engine="flashinfer")

"""Issue 39, vLLM residuals judged against vLLM 0.33's code: the default backend for attention sinks at
head 256 on 10.x with KV blocks that are not a multiple of 128."""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.policy import simulated_node

GPT_OSS_LIKE = {"head_dim": 256, "num_qo_heads": 16, "num_kv_heads": 2, "sinks": True}


def default(cfg, cubins=False, capability="10.0"):
    return policy.plan_for(policy.make_config(cfg), simulated_node(capability=capability, cubins=cubins),
                           engine="vllm").engine_backend.name


@pytest.mark.parametrize("block", [16, 32, 64])
def test_sinks_at_head_256_on_10x_with_small_blocks_default_to_triton(block):
    # FLASHINFER refuses sinks without trtllm-gen cubins; FLASH_ATTN's kernel block is FA4's 128
    # (flash_attn.py _get_fa4_hd256_block_size asks get_flash_attn_version without the sinks), so a block
    # of 16/32/64 refuses it too: vLLM's next is TRITON_ATTN.
    assert default({**GPT_OSS_LIKE, "page_size": block}) == "TRITON_ATTN"


@pytest.mark.parametrize("cfg", [{**GPT_OSS_LIKE, "page_size": 128}, {**GPT_OSS_LIKE, "page_size": 256}, GPT_OSS_LIKE,
                                 {**GPT_OSS_LIKE, "page_size": 16, "logits_soft_cap": 30.0},
                                 {**GPT_OSS_LIKE, "page_size": 16, "dcp_world_size": 2}])
def test_fa4_hd256_block_holds_only_where_fa4_resolves(cfg):
    # a multiple of 128 (or vLLM's own block, raised to 128), a soft cap or DCP (which send the model-level
    # version to FA2 in _fa4_hd256_fallback_reason): FLASH_ATTN takes it
    assert default(cfg) == "FLASH_ATTN"


def test_not_on_9x_and_not_with_cubins():
    assert default({**GPT_OSS_LIKE, "page_size": 16}, capability="9.0") != "TRITON_ATTN"
    assert default({**GPT_OSS_LIKE, "page_size": 16}, cubins=True) == "FLASHINFER"


MLA = {"num_qo_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "page_size": 64}


@pytest.mark.parametrize("nope,v,ok", [(128, 128, True), (192, 256, True), (64, 128, True), (192, 128, False), (64, 256, False)])
def test_vllm_refuses_an_mla_layout_it_has_no_prefill_for(nope, v, ok):
    # platforms/interface.py get_mla_prefill_backend_cls: FLASH_ATTN's supported_mla_dimensions (the others' are
    # a subset) or "No valid MLA prefill backend" at startup
    a = policy.plan_for(policy.make_config({**MLA, "qk_nope_head_dim": nope, "v_head_dim": v}), simulated_node("B200"),
                        engine="vllm")
    assert any(x.rule == "vllm.mla-prefill-dims" for x in a.violations) is (not ok)
    flashinfer = policy.plan_for(policy.make_config({**MLA, "qk_nope_head_dim": nope, "v_head_dim": v}),
                                 simulated_node("B200"), engine="flashinfer")
    assert not any(x.rule == "vllm.mla-prefill-dims" for x in flashinfer.violations)

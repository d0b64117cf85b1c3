"""Kernel rules where FlashInfer 0.6.13 (0.6.12 - 0.6.17, supported on Blackwell through the trtllm-gen table
pin 158f6fa1) differs from 0.7.2.post1 in the source each rule cites (issue 37 item 3): the rule carries the
range as data (rules/packs/core.yaml, mla.yaml)."""

from __future__ import annotations

from attnplan import policy
from attnplan.policy import AttentionConfig, simulated_node

FI = "flashinfer"   # the kernel layer alone


def violations(config: AttentionConfig, device: str, fi: str, rule: str, backend: str) -> list:
    a = policy.evaluate(config, simulated_node(device, flashinfer_version=fi), engine=FI)
    return [v for v in a.violations if v.rule == rule and v.backend == backend]


def test_xqa_head_512_is_in_0_6_18_and_after():
    c = AttentionConfig(head_dim=512, num_qo_heads=16, num_kv_heads=2, attention_backend="xqa")
    assert violations(c, "H100", "0.7.2.post1", "head-size", "xqa") == []
    (v,) = violations(c, "H100", "0.6.13", "head-size", "xqa")
    assert "0.6.18" in v.message and "0.6.13" in v.message
    # the sizes every release takes are unchanged
    assert violations(c.model_copy(update={"head_dim": 128}), "H100", "0.6.13", "head-size", "xqa") == []


def test_fa2_fp8_large_head_restriction_is_0_6_18_to_0_7_0():
    c = AttentionConfig(head_dim=512, num_qo_heads=16, num_kv_heads=4, kv_cache_dtype="fp8", attention_backend="fa2")
    for fi, refused in (("0.6.13", False), ("0.6.18", True), ("0.7.0.post1", True), ("0.7.1", False)):
        got = [v for p in ("prefill", "decode")
               for v in violations(c, "H100", fi, "fa2.fp8-large-head", "fa2") if v.phase == p]
        assert bool(got) == refused, fi


def test_trtllm_gen_mla_rope_less_dims_need_0_6_18():
    c = AttentionConfig(num_qo_heads=32, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=0,
                        v_head_dim=128, attention_backend="trtllm-gen-mla")
    assert [v for v in violations(c, "B200", "0.6.13", "mla.dims", "trtllm-gen-mla")]
    assert not [v for v in violations(c, "B200", "0.7.2.post1", "mla.dims", "trtllm-gen-mla")]

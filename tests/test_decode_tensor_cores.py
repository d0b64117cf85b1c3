"""Issue 39 (vLLM residual): the decode's tensor-core path is the engine's choice - vLLM 0.33 always passes
use_tensor_cores=True (flashinfer.py _get_decode_wrapper), SGLang decides by KV dtype and group
(flashinfer_backend.py should_use_tensor_core) - and kv.nvfp4-decode refuses only a CUDA-core decode."""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.policy import simulated_node
from attnplan.sglang import SglangEngine, SglangFlags

SMALL_GROUP = {"head_dim": 128, "num_qo_heads": 8, "num_kv_heads": 4}
SGL_FI = SglangEngine(SglangFlags(attention_backend="flashinfer"))


@pytest.mark.parametrize("cap", ["8.0", "8.6", "9.0"])
def test_vllm_decodes_nvfp4_below_group_4_on_tensor_cores(cap):
    a = policy.plan_for(policy.make_config({**SMALL_GROUP, "kv_cache_dtype": "nvfp4"}), simulated_node(capability=cap),
                        engine="vllm")
    assert not any(v.rule == "kv.nvfp4-decode" for v in a.violations)
    if a.plan is not None and a.plan.decode.backend == "fa2":
        assert a.plan.decode.use_tensor_cores is True


def test_the_flashinfer_layer_keeps_its_own_choice_and_the_rule():
    cfg = policy.make_config({**SMALL_GROUP, "kv_cache_dtype": "nvfp4"})
    a = policy.plan_for(cfg, simulated_node(capability="8.6"), engine="flashinfer")
    assert any(v.rule == "kv.nvfp4-decode" for v in a.violations)
    b = policy.plan_for(policy.make_config(SMALL_GROUP), simulated_node("A100"), engine="flashinfer")
    assert b.plan.decode.use_tensor_cores is False


@pytest.mark.parametrize("engine,kv,want", [("vllm", "auto", True), (SGL_FI, "auto", False), (SGL_FI, "fp8_e4m3", True)])
def test_use_tensor_cores_is_the_engines(engine, kv, want):
    a = policy.plan_for(policy.make_config({**SMALL_GROUP, "kv_cache_dtype": kv}), simulated_node("A100"), engine=engine)
    assert a.plan is not None and a.plan.decode.use_tensor_cores is want

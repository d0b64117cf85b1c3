"""Issue 39 (vLLM residual): an MLA model's prefill on 10.x is vLLM's own FLASH_ATTN unless the layout is
DeepSeek-V3.2's (192, 64, 256), which runs TRTLLM_RAGGED (platforms/interface.py get_mla_prefill_backend_cls):
the answer says so in engine_phases, and the FlashInfer prefill of the plan is then the one 'if forced'."""

from __future__ import annotations

import pytest

from attnplan import policy
from attnplan.policy import simulated_node
from attnplan.render import finish

MLA = {"num_qo_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "page_size": 64}


@pytest.mark.parametrize("nope,v,prefill,runs_fi", [(128, 128, "FLASH_ATTN", False), (192, 256, "TRTLLM_RAGGED", True)])
def test_vllm_mla_prefill_is_named_per_phase(nope, v, prefill, runs_fi):
    a = finish(policy.plan_for(policy.make_config({**MLA, "qk_nope_head_dim": nope, "v_head_dim": v}), simulated_node("B200"),
                        engine="vllm"))   # finished: render/ writes the notes from the planner's data
    assert a.ok and a.engine_phases["prefill"].name == prefill and a.engine_phases["prefill"].runs_flashinfer is runs_fi
    assert a.engine_phases["decode"].name == "FLASHINFER_MLA" and a.plan.prefill.backend == "trtllm-ragged"
    if not runs_fi:
        assert "mla_prefill_backend" in a.engine_phases["prefill"].note


def test_standard_attention_answers_carry_no_engine_phases_under_vllm():
    a = policy.plan_for(policy.make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}),
                        simulated_node("B200"), engine="vllm")
    assert a.engine_phases is None

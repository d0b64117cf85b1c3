"""The execution adapter's startup check (SPEC §6): re-evaluate the rules on live facts, refuse
a plan that does not hold before touching the device, and never re-decide what the rules decide."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnplan.policy import (AttentionConfig, Fact, PlanMismatchError, UnsupportedConfigurationError, plan_for,
                    simulated_node)

pytest.importorskip("torch")

from attnplan.adapter import AttentionExecutor, check_plan  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
# head 256 (kernel table 158f6fa1 has no NVFP4 kernel at head 512): trtllm-gen in both phases, 10.x only
B200_ONLY = AttentionConfig(head_dim=256, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4")


def rules(exc: PlanMismatchError) -> set[str]:
    return {v.rule for v in exc.violations}


def test_import_is_light():
    code = ("import sys, attnplan.adapter; attnplan.adapter.AttentionExecutor; "
            "print('torch' in sys.modules, 'flashinfer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", "import sys, attnplan.adapter; print('torch' in sys.modules, "
                          "'flashinfer' in sys.modules)"], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "False", "building no executor must not import flashinfer"


def test_b200_plan_refused_on_h100_before_any_device_work(monkeypatch):
    answer = plan_for(B200_ONLY, simulated_node("B200", cubins="available"))
    assert answer.ok and answer.backends() == ("trtllm-gen", "trtllm-gen")
    import attnplan.adapter.kv_cache as kvc

    touched = []
    monkeypatch.setattr(kvc, "allocate", lambda *a, **k: touched.append(a))
    sys.modules.pop("attnplan.adapter.flashinfer_backend", None)
    with pytest.raises(PlanMismatchError) as err:
        AttentionExecutor(answer, node=simulated_node("H100"))
    assert {"kv.nvfp4-sm100f", "trtllm.family"} <= rules(err.value)
    assert isinstance(err.value, UnsupportedConfigurationError) and isinstance(err.value, ValueError)
    assert "capability: plan '10.0', here '9.0'" in str(err.value)
    # Refused before the backend (flashinfer import, workspace allocation) was even built.
    assert "attnplan.adapter.flashinfer_backend" not in sys.modules and not touched


@pytest.mark.parametrize("live, rule", [
    (simulated_node("B200", cubins="missing"), "trtllm.cubins"),
    (simulated_node("B200", cubins="available").with_fact(batch_invariant_env=Fact.measured(True)),
     "trtllm.batch-invariant"),
    (simulated_node("GB300", flashinfer_version="0.6.7", cubins="available"), "trtllm.sm103-hang"),
    (simulated_node("A100"), "trtllm.family"),
])
def test_live_facts_that_break_a_trtllm_plan(live, rule):
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("B200", cubins="available"))
    assert answer.backends() == ("trtllm-gen", "trtllm-gen")
    with pytest.raises(PlanMismatchError) as err:
        check_plan(answer, live)
    assert rule in rules(err.value)
    assert f"[{rule}]" in str(err.value)


def test_same_facts_pass_and_return_the_live_answer():
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"))
    live = check_plan(answer, simulated_node("H100"))
    assert live.ok and live.plan == answer.plan


def test_valid_but_not_chosen_backend_is_a_selection_mismatch():
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("A100"))        # fa2 prefill
    with pytest.raises(PlanMismatchError) as err:
        check_plan(answer, simulated_node("H100"))                            # rules pick fa3 here
    assert rules(err.value) == {"selection"}
    h100 = plan_for(AttentionConfig(**LLAMA), simulated_node("H100")).backends()       # fa3 + vLLM's XQA decode
    assert check_plan(answer, simulated_node("H100"), strict_selection=False).backends() == h100


def test_forced_backend_checked_by_its_own_rules():
    answer = plan_for(AttentionConfig(**LLAMA, attention_backend="fa3"), simulated_node("H100"))
    assert answer.backends() == ("fa3", "fa3")
    with pytest.raises(PlanMismatchError) as err:
        check_plan(answer, simulated_node("A100"))
    assert rules(err.value) == {"fa3.arch"}
    assert {v.phase for v in err.value.violations} == {"prefill", "decode"}


def test_rejected_answer_cannot_build_an_executor():
    # head_dim 96: XQA decodes it but neither fa2 (split-KV merge) nor fa3 prefills it.
    answer = plan_for(AttentionConfig(head_dim=96, num_qo_heads=32, num_kv_heads=8), simulated_node("H100"))
    assert not answer.ok
    with pytest.raises(UnsupportedConfigurationError):
        AttentionExecutor(answer, backend="reference", device="cpu")


def test_no_gpu_fails_closed():
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"))
    from attnplan.policy import NodeFacts

    with pytest.raises(PlanMismatchError) as err:
        check_plan(answer, NodeFacts(capability=Fact.unknown("NVML: no driver")))
    assert "device.cuda" in rules(err.value)


@pytest.mark.parametrize("engine", ["vllm", "flashinfer"])
def test_startup_check_uses_the_answers_engine(engine):
    """A kernel-truth plan (fa2 decode on the H100) holds under ``--engine flashinfer``; re-checked
    under vLLM's layer it would be a selection mismatch (vLLM 0.33 decodes with XQA there)."""
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"), engine=engine)
    live = check_plan(answer, simulated_node("H100"))
    assert live.plan == answer.plan and live.engine.name == engine

"""The verdict of the command as given (policy/verdict.py, docs/contract.md "The verdict"): the engine's own pick
and what then happens, never FlashInfer's plan read as the command's fate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan.cli.main import main
from attnplan.policy import default_ruleset, plan_for, simulated_node
from attnplan.model import plan_model
from attnplan.policy.answer import Violation
from attnplan.render.verdict import verdict_message
from attnplan.policy.verdict import OUTCOMES, violation_outcome, worst

PRESETS = Path(__file__).resolve().parents[1] / "attnplan" / "presets"
GEMMA2_LAYER = dict(head_dim=256, num_qo_heads=16, num_kv_heads=8, logits_soft_cap=50.0)
LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main([*argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("device,model,tp,backend", [
    ("H100", "deepseek-v3", 8, "FLASH_ATTN_MLA"),   # vLLM serves it on its own MLA kernels
    ("A100", "gpt-oss-120b", 1, "TRITON_ATTN"),      # sinks on 8.x: TRITON_ATTN
    ("H100", "gemma-2-9b", 1, "FLASH_ATTN"),         # FLASH_ATTN applies the soft cap
])
def test_the_engines_own_backend_runs_and_is_not_modelled(device, model, tp, backend):
    a = plan_model(PRESETS / f"{model}.json", simulated_node(device), tensor_parallel_size=tp)
    v = a.verdict
    assert (v.outcome, v.modelled, v.selected.decode, v.flashinfer_plan) == ("runs", False, backend, "if-forced")
    assert v.forced_with and "FLASHINFER" in v.forced_with and v.rules == ()
    assert v.exit_code() == 0 and v.exit_code(require_flashinfer=True) == 1


def test_cli_exit_follows_the_verdict_not_flashinfers_plan(capsys):
    rc, data = run_json(capsys, "plan", "--device", "H100", "--model", "deepseek-v3", "--tensor-parallel-size", "8")
    assert rc == 0 and data["verdict"]["outcome"] == "runs" and data["status"] == "rejected"
    assert list(data)[:2] == ["schema_version", "verdict"]  # the verdict leads the answer
    rc = main(["plan", "--device", "H100", "--model", "deepseek-v3", "--tensor-parallel-size", "8", "--require-flashinfer"])
    capsys.readouterr()
    assert rc == 1


def test_a_dropped_soft_cap_is_wrong_output_not_a_startup_failure():
    a = plan_for(GEMMA2_LAYER, simulated_node("B200"))
    v = a.verdict
    assert (v.outcome, v.modelled, v.selected.decode) == ("wrong-output", True, "FLASHINFER")
    assert v.rules == ("vllm.softcap-dropped",)
    # every fix is re-evaluated: the same config with that flag gives exactly the fix's outcome
    assert v.fixes
    for f in v.fixes:
        if f.args.startswith("--attention-config"):   # vLLM's FlashInfer off trtllm/XQA (test_attention_config.py)
            changed = {**GEMMA2_LAYER, "use_trtllm_attention": False}
        else:
            changed = {**GEMMA2_LAYER, "attention_backend": f.args.split()[-1]}
        assert plan_for(changed, simulated_node("B200")).verdict.outcome == f.outcome


def test_a_typed_engine_backend_is_judged_by_the_engines_own_validation():
    ok = plan_for({**LLAMA, "attention_backend": "FLASH_ATTN"}, simulated_node("H100")).verdict
    assert (ok.outcome, ok.selected.decode, ok.modelled) == ("runs", "FLASH_ATTN", False)
    # FLASH_ATTN has no fp8_e5m2 cache (backends.yaml engines.vllm.engine_backend): vLLM refuses at startup
    bad = plan_for({**LLAMA, "attention_backend": "FLASH_ATTN", "kv_cache_dtype": "fp8_e5m2"}, simulated_node("H100")).verdict
    assert bad.outcome == "fails-at-startup" and "kv_cache_dtype not supported" in verdict_message(bad)
    assert "Selected backend FLASH_ATTN is not valid" in verdict_message(bad)


def test_a_kernel_refusal_fails_where_its_phase_first_runs():
    rs = default_ruleset()
    kernel = [r for r in rs.rules if r.layer == "kernel" and r.outcome is None][0].id
    def out(phase: str, engine: str = "vllm") -> str:
        return violation_outcome(Violation(rule=kernel, phase=phase, message="m"), rs, engine)
    assert out("decode") == "fails-at-graph-capture" and out("prefill") == "fails-at-first-request"
    assert out("both") == "fails-at-startup"
    assert out("decode", "flashinfer") == "fails-at-startup"  # attnplan's adapter refuses at engine init
    assert worst(["runs", "wrong-output", "fails-at-first-request"]) == "fails-at-first-request"
    assert worst(OUTCOMES) == "fails-at-startup" and worst([]) == "runs"


def test_flashinfer_selected_and_valid_runs_modelled():
    v = plan_for({**LLAMA, "kv_cache_dtype": "fp8"}, simulated_node("B200")).verdict
    assert (v.outcome, v.modelled, v.flashinfer_plan, v.fixes) == ("runs", True, "command", ())


def test_the_flashinfer_engine_fails_at_startup_on_a_rejection():
    v = plan_for({**LLAMA, "head_dim": 96}, simulated_node("H100"), engine="flashinfer").verdict
    assert v.engine.startswith("flashinfer") and v.outcome in ("runs", "fails-at-startup")
    rejected = plan_for({**LLAMA, "attention_backend": "fa3", "kv_cache_dtype": "fp8_e5m2"}, simulated_node("A100"),
                        engine="flashinfer")
    assert not rejected.ok and rejected.verdict.outcome == "fails-at-startup" and rejected.verdict.modelled


def test_serve_line_startup_error_is_the_verdict(capsys):
    rc, data = run_json(capsys, "vllm", "serve", "llama-3.1-8b", "-tp", "3", "--device", "H100")
    assert rc == 1 and data["verdict"]["outcome"] == "fails-at-startup" and data["verdict"]["rules"] == ["vllm.startup"]


def test_labels_never_name_a_rule_where_the_model_runs(capsys):
    assert main(["labels", "--device", "H100", "--model", "deepseek-v3", "--json"]) in (0, 1)
    labels = json.loads(capsys.readouterr().out)
    assert labels["attnplan.io/model-deepseek-v3"] == "runs"
    assert labels["attnplan.io/model-deepseek-v3-backend"] == "FLASH_ATTN_MLA"
    main(["labels", "--device", "B200", "--model", "gemma-2-9b", "--json"])
    labels = json.loads(capsys.readouterr().out)
    assert labels["attnplan.io/model-gemma-2-9b"] == "vllm.softcap-dropped"

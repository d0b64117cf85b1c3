"""vLLM's ``--attention-config`` keys that steer its FlashInfer backend (issue 36): use_trtllm_attention and
disable_flashinfer_q_quantization are modelled (rule vllm.use-trtllm-attention, the query-dtype rows), on the
CLI, the request model, REST and the plugin's VllmConfig mapping, and the soft-cap fix they give is executable."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node
from attnplan.policy.errors import InvalidInputError
from attnplan.vllm.args import line_from_namespace
from attnplan.request import ModelRequest
from attnplan.vllm.serve import attention_config_fields

LLAMA = dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16")
GEMMA2 = dict(num_qo_heads=16, num_kv_heads=8, head_dim=256, dtype="bfloat16", logits_soft_cap=50.0)


def _plan(cfg: dict, device: str, **kw):
    return plan_for({**cfg, **kw}, simulated_node(device))


@pytest.mark.parametrize("device", ["B200", "GB300"])
def test_off_moves_10x_to_the_native_wrappers(device):
    on, off = _plan(LLAMA, device), _plan(LLAMA, device, use_trtllm_attention=False)
    assert on.backends() == ("trtllm-gen", "trtllm-gen")
    assert off.ok and off.backends() == ("fa2", "fa2")
    assert any("vllm.use-trtllm-attention" in f.rules for f in off.fallbacks)
    # forcing it on is vLLM's default choice here
    assert _plan(LLAMA, device, use_trtllm_attention=True).backends() == on.backends()


def test_off_moves_hopper_decode_from_xqa():
    on = _plan(LLAMA, "H100", attention_backend="flashinfer")
    off = _plan(LLAMA, "H100", attention_backend="flashinfer", use_trtllm_attention=False)
    assert on.backends()[1] == "xqa" and off.backends()[1] != "xqa"


def test_soft_cap_is_applied_with_trtllm_off():
    wrong = _plan(GEMMA2, "B200")
    assert wrong.verdict.outcome == "wrong-output" and "vllm.softcap-dropped" in wrong.verdict.rules
    fixed = _plan(GEMMA2, "B200", use_trtllm_attention=False)
    assert fixed.verdict.outcome == "runs" and fixed.backends() == ("fa2", "fa2")
    # the fix the wrong answer offers is the flag, re-evaluated to the answer above
    fix = next(f for f in wrong.verdict.fixes if f.args and "use_trtllm_attention" in f.args)
    assert fix.outcome == fixed.verdict.outcome
    args = json.loads(fix.args.split(" ", 1)[1].strip("'"))
    assert args == {"use_trtllm_attention": False}


def test_sinks_leave_flashinfer_with_trtllm_off():
    gpt_oss = dict(num_qo_heads=64, num_kv_heads=8, head_dim=64, dtype="bfloat16", sinks=True, sliding_window=128)
    on = _plan(gpt_oss, "B200")
    off = _plan(gpt_oss, "B200", use_trtllm_attention=False)
    assert on.verdict.selected.runs_flashinfer
    # FlashInferBackend.supports_sink is False: vLLM's selection moves on to its own backends
    assert not off.verdict.selected.runs_flashinfer and off.verdict.outcome == "runs"


def test_nvfp4_on_10x_needs_trtllm():
    ok = _plan(LLAMA, "B200", kv_cache_dtype="nvfp4")
    off = _plan(LLAMA, "B200", kv_cache_dtype="nvfp4", use_trtllm_attention=False)
    assert ok.ok and not off.ok
    assert "vllm.nvfp4" in {v.rule for v in off.violations}


def test_disable_q_quantization_keeps_the_model_dtype():
    q = _plan(LLAMA, "B200", kv_cache_dtype="fp8")
    kept = _plan(LLAMA, "B200", kv_cache_dtype="fp8", disable_flashinfer_q_quantization=True)
    assert q.plan.prefill.query_dtype == "float8_e4m3fn"
    assert kept.ok and kept.plan.prefill.query_dtype == kept.plan.decode.query_dtype == "bfloat16"
    # a 16-bit query over fp8 KV: trtllm-gen's context kernels are generation-only for it (FlashInfer's kernel
    # table), so prefill runs FlashInfer's native wrapper - as vLLM's use_trtllm_attention picks (kv not "auto")
    assert kept.backends()[0] == "fa2" and q.backends()[0] == "trtllm-gen"


def test_values_are_checked_as_vllm_takes_them():
    assert attention_config_fields({"use_trtllm_attention": 0}) == {"use_trtllm_attention": False}
    assert attention_config_fields({"use_trtllm_attention": None}) == {}
    assert attention_config_fields({"backend": "FLASHINFER", "flash_attn_version": 3}) == {}
    with pytest.raises(InvalidInputError, match="use_trtllm_attention"):
        attention_config_fields({"use_trtllm_attention": "no"})
    with pytest.raises(Exception):
        AttentionConfig(**LLAMA, use_trtllm_attention="false")


def test_vllm_parser_object_and_json_read_the_same():
    ns = SimpleNamespace(model="gemma-2-9b", attention_config=SimpleNamespace(
        backend=None, use_trtllm_attention=False, disable_flashinfer_q_quantization=False))
    js = SimpleNamespace(model="gemma-2-9b", attention_config='{"use_trtllm_attention": false}')
    assert line_from_namespace(ns, "vllm").attention_config == line_from_namespace(js, "table").attention_config \
        == {"use_trtllm_attention": False}
    req = ModelRequest.from_serve_line(line_from_namespace(js, "table"))
    assert req.line_fields()["use_trtllm_attention"] is False


def test_cli_line_runs_with_the_flag():
    def run(*extra):
        p = subprocess.run([sys.executable, "-m", "attnplan", "vllm", "serve", "gemma-2-9b", "--device", "B200",
                            "--json", *extra], capture_output=True, text=True, timeout=120)
        return p.returncode, json.loads(p.stdout)
    rc, wrong = run()
    assert wrong["verdict"]["outcome"] == "wrong-output" and rc == 1
    rc, fixed = run("--attention-config", '{"use_trtllm_attention": false}')
    assert fixed["verdict"]["outcome"] == "runs" and rc == 0


def test_rest_model_body_takes_attention_config():
    from fastapi.testclient import TestClient

    from attnplan.rest.app import create_app

    c = TestClient(create_app())
    body = {"model": "gemma-2-9b", "node": {"device": "B200"}}
    r1 = c.post("/v1/plan", json=body)
    r2 = c.post("/v1/plan", json={**body, "attention_config": {"use_trtllm_attention": False}})
    assert r1.status_code == r2.status_code == 200, (r1.text, r2.text)
    assert r1.json()["verdict"]["outcome"] == "wrong-output" and r2.json()["verdict"]["outcome"] == "runs"
    bad = c.post("/v1/plan", json={**body, "attention_config": {"use_trtllm_attention": "x"}})
    assert bad.status_code == 422

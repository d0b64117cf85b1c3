"""An SGLang launch_server line is one ModelRequest planned by the one pipeline (issue 36): ``attnplan sglang
launch_server``, ``preflight --serve``, a preflight configs file and REST ``POST /v1/plan`` give the same verdict
for the same line; the SGLang-only flags (per-phase backends, EAGLE, DP attention) ride in ``sglang``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnplan.policy import InvalidInputError, simulated_node
from attnplan.lines import plan_launch
from attnplan.sglang.launch import parse_launch_text
from attnplan.lines import is_launch_line, request_from_launch_line, request_from_line
from attnplan.request import ModelRequest, plan_request

LINES = [
    "python -m sglang.launch_server --model-path gemma-2-9b",
    "python -m sglang.launch_server --model-path deepseek-v3 --tp 8 --dp 8 --enable-dp-attention",
    "sglang.launch_server --model-path llama-3.1-8b --speculative-algorithm EAGLE --speculative-eagle-topk 4 "
    "--speculative-num-steps 3 --speculative-num-draft-tokens 8 --attention-backend trtllm_mha",
    "python3 -m sglang.launch_server --model-path llama-3.1-8b --prefill-attention-backend fa3 "
    "--decode-attention-backend flashinfer --kv-cache-dtype fp8_e4m3",
]


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("device", ["H100", "B200"])
def test_launch_line_and_request_agree(line, device):
    node = simulated_node(device)
    req = request_from_line(line)
    assert req.engine == "sglang"
    via_request = plan_request(req, node).verdict
    via_launch = plan_launch(parse_launch_text(line), node).verdict
    assert via_request == via_launch


def test_sglang_flags_ride_in_the_request():
    req = request_from_line(LINES[1])
    assert req.tensor_parallel_size == 8 and req.sglang.attn_dp_size == 8
    sa = plan_request(req, simulated_node("H100"))
    assert any("data-parallel attention" in n for n in sa.notes)
    eagle = request_from_line(LINES[2]).sglang
    assert (eagle.speculative_eagle_topk, eagle.speculative_num_draft_tokens) == (4, 8)
    # a vLLM line stays vLLM's; SGLang's flags on a vLLM request are bad input
    assert not is_launch_line("vllm serve llama-3.1-8b -tp 2") and is_launch_line(LINES[0])
    with pytest.raises(InvalidInputError, match="sglang"):
        plan_request(ModelRequest.build(model="llama-3.1-8b", engine="vllm", sglang={"attn_dp_size": 2}),
                     simulated_node("H100"))
    with pytest.raises(InvalidInputError):
        request_from_launch_line(parse_launch_text(LINES[0]), engine="vllm")


def test_dp_attention_that_does_not_divide_tp_is_sglangs_startup_refusal():
    sa = plan_request(request_from_line("python -m sglang.launch_server --model-path deepseek-v3 --tp 8 "
                                             "--dp 3 --enable-dp-attention"), simulated_node("H100"))
    assert sa.startup_error and "divisible" in sa.startup_error


def test_preflight_takes_a_launch_line(tmp_path: Path):
    def run(*args):
        p = subprocess.run([sys.executable, "-m", "attnplan", "preflight", "--simulate", "B200=1,H100=1", "--json", *args],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 1), p.stderr
        return json.loads(p.stdout)

    got = run("--serve", LINES[0])
    text = json.dumps(got)
    # the per-device verdicts are the ones the launch pipeline gives
    for device in ("B200", "H100"):
        v = plan_launch(parse_launch_text(LINES[0]), simulated_node(device)).verdict
        assert v.outcome in text
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"- {{name: g2, serve: \"{LINES[0]}\"}}\n")
    assert json.dumps(run("--configs", str(cfg))).count("wrong-output") == text.count("wrong-output")


def test_rest_plan_body_with_sglang_fields():
    from fastapi.testclient import TestClient

    from attnplan.rest.app import create_app

    c = TestClient(create_app(node=simulated_node("H100")))
    req = request_from_line(LINES[1])
    r = c.post("/v1/plan", json=req.wire())
    assert r.status_code == 200, r.text
    want = plan_request(req, simulated_node("H100")).verdict.model_dump(mode="json")
    assert r.json()["verdict"] == want
    bad = c.post("/v1/plan", json={**req.wire(), "sglang": {"attn_dp_size": "8"}})
    assert bad.status_code == 422


def test_a_release_refuses_the_flags_it_does_not_have():
    """--attn-dp-size (and its long alias) and the llada2_cfg_flashinfer backend arrived in SGLang 0.5.22: a line
    for 0.5.21 naming one is refused as 0.5.21's parser refuses it; the --dp N --enable-dp-attention spelling of
    the same split works in every release."""
    new = parse_launch_text("python -m sglang.launch_server --model-path deepseek-v3 --tp 8 --attention-data-parallel-size 8")
    assert request_from_launch_line(new, engine="sglang==0.5.22").sglang.attn_dp_size == 8
    with pytest.raises(InvalidInputError, match="0.5.21 has no --attention-data-parallel-size"):
        request_from_launch_line(new, engine="sglang==0.5.21")
    old = parse_launch_text("python -m sglang.launch_server --model-path deepseek-v3 --tp 8 --dp 8 --enable-dp-attention")
    assert request_from_launch_line(old, engine="sglang==0.5.21").sglang.attn_dp_size == 8

"""SGLang launch lines on every surface (issue 36 item 5): REST POST /v1/plan/launch answers what `attnplan sglang
launch_server --json` prints (the verdict first), a client's --model-path is a preset or a cached repo id, never a
path; data-parallel attention splits the heads over tp / dp attention ranks."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from attnplan.cli.main import main
from attnplan.policy import simulated_node
from attnplan.rest.app import create_app


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(node=simulated_node("B200")))


@pytest.mark.parametrize("line,device", [
    ("python -m sglang.launch_server --model-path deepseek-v3 --tp 8", "B200"),
    ("--model-path gpt-oss-120b --attention-backend flashinfer", "H100"),
    ("--model-path llama-3.1-8b --tp 8 --dp 8 --enable-dp-attention", "B200"),
    ("--model-path gemma-2-9b", "B200"),
])
def test_rest_launch_is_the_clis_answer(client, capsys, line, device):
    r = client.post("/v1/plan/launch", params={"trace": "false"}, json={"line": line, "node": {"device": device}})
    assert r.status_code == 200
    rc = main(["sglang", "launch_server", *line.split(), "--device", device, "--json", "--no-trace"])
    cli = json.loads(capsys.readouterr().out)
    assert r.json()["verdict"] == cli["verdict"] and r.json()["per_rank"] == cli["per_rank"]
    assert rc == (0 if cli["verdict"]["outcome"] == "runs" else 1)


@pytest.mark.parametrize("line", ["--model-path /etc/passwd", "--model-path ../../../etc", "--model-path x --config /etc/passwd",
                                  "--model-path llama-3.1-8b --tp", "", "--model-path 'unterminated"])
def test_rest_launch_bad_input_is_422_without_echo_or_file_reads(client, line):
    r = client.post("/v1/plan/launch", json={"line": line})
    assert r.status_code == 422 and "/etc/passwd" not in r.text and "root:" not in r.text


def test_text_plain_body(client):
    r = client.post("/v1/plan/launch", content="--model-path qwen3-32b --tp 2", headers={"content-type": "text/plain"})
    assert r.status_code == 200 and r.json()["verdict"]["engine"] == "sglang==0.5.23"


def test_dp_attention_splits_heads_over_attention_ranks(capsys):
    # llama-3.1-8b: 32 query / 8 KV heads; tp 8 with dp 4 attention: 2 attention ranks per group -> 16/4 heads
    rc = main(["sglang", "launch_server", "--model-path", "llama-3.1-8b", "--tp", "8", "--dp", "4",
               "--enable-dp-attention", "--device", "B200", "--json"])
    d = json.loads(capsys.readouterr().out)
    cfg = d["per_rank"]["config"]
    assert rc == 0 and (cfg["num_qo_heads"], cfg["num_kv_heads"]) == (16, 4) and d["sglang"]["attn_dp_size"] == 4
    rc = main(["sglang", "launch_server", "--model-path", "llama-3.1-8b", "--tp", "8", "--attn-dp-size", "8",
               "--device", "B200", "--json"])
    cfg = json.loads(capsys.readouterr().out)["per_rank"]["config"]
    assert rc == 0 and (cfg["num_qo_heads"], cfg["num_kv_heads"]) == (32, 8)
    rc = main(["sglang", "launch_server", "--model-path", "llama-3.1-8b", "--tp", "8", "--dp", "3",
               "--enable-dp-attention", "--device", "B200", "--json"])
    v = json.loads(capsys.readouterr().out)["verdict"]
    assert rc == 1 and v["outcome"] == "fails-at-startup" and "divisible" in v["message"]

"""``POST /v1/upgrade`` (issue 42 item 3): the report `attnplan upgrade --json` prints, over HTTP; bad bodies
are 422s naming the field, under the one body policy (rest/bodies.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan.cli.main import main as cli_main
from attnplan.policy import default_ruleset, simulated_node
from attnplan.upgrade import Target, model_planner, parse_sides, upgrade

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "attnplan" / "presets" / "llama-3.1-8b.json"
FI = {"from": "flashinfer==0.6.7", "to": "flashinfer==0.7.2.post1"}


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from attnplan.rest.app import create_app

    return TestClient(create_app(node=simulated_node("H100")))


def test_model_report_is_the_librarys(client):
    r = client.post("/v1/upgrade", json={**FI, "model": "llama-3.1-8b", "devices": ["GB300", "B200"], "kv_cache_dtype": "fp8"})
    assert r.status_code == 200
    rs = default_ruleset()
    a, b = parse_sides(FI["from"], FI["to"], rs)
    want = upgrade(rs, a, b, {"llama-3.1-8b": model_planner(str(LLAMA), rs, overrides={"kv_cache_dtype": "fp8"})},
                   [Target(d, simulated_node(d)) for d in ("GB300", "B200")])
    assert r.json() == json.loads(json.dumps(want.to_json(), default=str))
    assert {"from", "to", "engine", "rules_changed", "deployments", "worse", "severity"} <= set(r.json())


def test_no_devices_plans_the_services_node(client):
    r = client.post("/v1/upgrade", json={**FI, "model": "llama-3.1-8b"})
    assert r.status_code == 200
    d, = r.json()["deployments"]
    assert d["capability"] == simulated_node("H100").capability_str


def _deployments(data):
    return [{k: v for k, v in d.items() if k != "deployment"} for d in data["deployments"]]


def test_lines_answer_as_the_cli(client, capsys):
    serve = "vllm serve llama-3.1-8b -tp 2"
    launch = "python -m sglang.launch_server --model-path llama-3.1-8b"
    for field, line in (("serve", serve), ("launch", launch)):
        r = client.post("/v1/upgrade", json={"from": FI["to"], "to": FI["from"], field: line, "devices": ["GB300"]})
        assert r.status_code == 200, r.text
        rc = cli_main(["upgrade", "--from", FI["to"], "--to", FI["from"], "--device", "GB300", "--json", "--",
                       *line.split()])
        cli = json.loads(capsys.readouterr().out)
        assert _deployments(r.json()) == _deployments(cli)
        assert r.json()["worse"] == cli["worse"] == bool(rc)


@pytest.mark.parametrize("body,field", [
    ({**FI, "from": "vllm==0.33.0", "to": "vllm==0.33.0", "model": "llama-3.1-8b"}, "to"),
    ({"from": "vllm==0.1.0", "to": "vllm==0.33.0", "model": "llama-3.1-8b"}, "from"),
    ({"from": "vllm==0.33.0", "to": "sglang==0.5.23", "model": "llama-3.1-8b"}, "to"),
    ({**FI, "to": "vllm==0.33.0", "model": "llama-3.1-8b"}, "to"),
    ({**FI, "model": "../../etc/passwd"}, "model"),
    ({**FI, "model": "no-such-preset"}, "model"),
    ({**FI, "model": "llama-3.1-8b", "devices": ["H999"]}, "devices"),
    ({**FI, "model": "llama-3.1-8b", "devices": []}, "devices"),
    ({**FI, "model": "llama-3.1-8b", "tp": "2"}, "tp"),
    ({**FI, "model": "llama-3.1-8b", "tp": True}, "tp"),
    ({**FI, "model": "llama-3.1-8b", "tp": 3}, "tp"),
    ({**FI, "model": "llama-3.1-8b", "kv_cache_dtype": "mxfp8"}, "kv_cache_dtype"),
    ({**FI, "model": "llama-3.1-8b", "unknown": 1}, "unknown"),
    ({**FI}, "body"),
    ({**FI, "model": "llama-3.1-8b", "serve": "vllm serve llama-3.1-8b"}, "body"),
    ({**FI, "serve": "vllm serve llama-3.1-8b", "tp": 2}, "body"),
    ({**FI, "model": "llama-3.1-8b", "flashinfer_version": "0.6.7"}, "body"),
    ({**FI, "serve": "vllm serve /etc/passwd"}, "serve"),
    ({**FI, "serve": "vllm serve llama-3.1-8b --config /etc/passwd"}, "serve"),
    ({**FI, "engine": "vllm", "launch": "python -m sglang.launch_server --model-path llama-3.1-8b"}, "engine"),
    ({"to": "vllm==0.33.0", "model": "llama-3.1-8b"}, "from"),
])
def test_bad_bodies_are_422_naming_the_field(client, body, field):
    r = client.post("/v1/upgrade", json=body)
    assert r.status_code == 422, r.text
    locs = [e["loc"] for e in r.json()["detail"]]
    assert any(loc[:2] == ["body", field] or (field == "body" and loc == ["body"]) for loc in locs), locs


def test_the_body_policy_is_the_other_routes(client):
    dup = '{"from": "flashinfer==0.6.7", "from": "flashinfer==0.6.7", "to": "flashinfer==0.7.2.post1", "model": "llama-3.1-8b"}'
    r = client.post("/v1/upgrade", content=dup, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "duplicate" in r.text
    r = client.post("/v1/upgrade", content=json.dumps({**FI, "model": "llama-3.1-8b"}), headers={"content-type": "text/plain"})
    assert r.status_code == 415


MARK = "zq9MARKzq9"


@pytest.mark.parametrize("body", [
    {**FI, "model": MARK},
    {**FI, "model": "llama-3.1-8b", "devices": [MARK]},
    {**FI, "model": "llama-3.1-8b", "kv_cache_dtype": MARK},
    {**FI, "config_json": {"model_type": "llama", "num_attention_heads": MARK}},
    {**FI, "serve": f"vllm serve {MARK}"},
    {**FI, "serve": f"vllm serve llama-3.1-8b --kv-cache-dtype {MARK}"},
    {**FI, "launch": f"python -m sglang.launch_server --model-path {MARK}"},
    {"from": f"vllm=={MARK}", "to": "vllm==0.33.0", "model": "llama-3.1-8b"},
    {"from": MARK, "to": "vllm==0.33.0", "model": "llama-3.1-8b"},
    {**FI, "engine": MARK, "model": "llama-3.1-8b"},
])
def test_errors_never_repeat_the_clients_input(client, body):
    r = client.post("/v1/upgrade", json=body)
    assert r.status_code == 422, r.text
    assert MARK not in r.text, r.text


def test_non_json_numbers_are_refused(client):
    r = client.post("/v1/upgrade", content='{"from": "flashinfer==0.6.7", "to": "flashinfer==0.7.2.post1", '
                                           '"model": "llama-3.1-8b", "tp": NaN}', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body", r.text


def test_the_services_own_presets(tmp_path):
    from fastapi.testclient import TestClient

    from attnplan.rest.app import create_app

    custom = json.loads(LLAMA.read_text())
    custom["num_key_value_heads"] = 4
    (tmp_path / "my-llama.json").write_text(json.dumps(custom))
    with TestClient(create_app(node=simulated_node("H100"), examples_dir=tmp_path)) as c:
        for name in ("my-llama", "llama-3.1-8b"):  # the service's own, and a shipped one
            r = c.post("/v1/upgrade", json={**FI, "model": name, "devices": ["B200"]})
            assert r.status_code == 200, (name, r.text)
            assert r.json()["deployments"][0]["deployment"] == name

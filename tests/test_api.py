"""The REST service against real uvicorn servers on free 127.0.0.1 ports (no in-process client).

Network rule: every request goes to 127.0.0.1. Probes run with an injected environment whose
artifactory check is off, or pointed at a loopback http.server.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from attnplan.rest.app import create_app
from attnplan.rest.security import MAX_BODY_BYTES, is_loopback, resolve_token
from attnplan.rest.server import BackgroundServer
from attnplan.cli.main import main as cli_main
from attnplan.render import rules_json
from attnplan.policy import default_ruleset, simulated_node
from attnplan.node import NodeCache, ProbeIO, probe_node
from attnplan.model import fields_from_hf
from attnplan.policy.matrix import capability_matrix, matrix_markdown

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "t0k-Zq9-not-logged"
LLAMA = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
SAFE_ENV = {"ATTNPLAN_ARTIFACTORY_CHECK": "never"}


def safe_io(**over) -> ProbeIO:
    return ProbeIO(env=dict(SAFE_ENV), **over)


@pytest.fixture(scope="module")
def local():
    """This machine, probed in the background (artifactory check off)."""
    with BackgroundServer(create_app(probe_io=safe_io())) as srv:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            wait_ready(c)
            yield c


@pytest.fixture(scope="module")
def authed():
    with BackgroundServer(create_app(node=simulated_node("B200"), token=TOKEN)) as srv:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            yield c


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": "Bearer " + token}


def wait_ready(c: httpx.Client, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, c.get("/readyz").text
        time.sleep(0.02)


def cli_json(capsys, *argv: str) -> dict:
    cli_main(list(argv))
    return json.loads(capsys.readouterr().out)


def wire(cli_answer: dict) -> dict:
    """The CLI's --json answer as /v1/plan sends it: with the answer schema's version."""
    return {**cli_answer, "schema_version": "1"}


def fields(resp: httpx.Response) -> list[str]:
    assert resp.status_code == 422, resp.text
    return [e["field"] for e in resp.json()["detail"]]


# -- endpoints -----------------------------------------------------------------------------
def test_health_and_ready(local):
    assert local.get("/healthz").json() == {"status": "ok"}
    r = local.get("/readyz")
    assert r.status_code == 200 and r.json()["ready"] is True


def test_node_facts_and_refresh(local):
    r = local.get("/v1/node")
    assert r.status_code == 200
    data = r.json()
    assert set(data) == {"node", "fingerprint"}
    assert data["node"]["hostname"]["source"] == "measured"
    assert data["node"]["artifactory_reachable"]["source"] == "unknown"  # never checked here
    r2 = local.get("/v1/node", params={"refresh": "true"})
    assert r2.status_code == 200 and r2.json()["fingerprint"] == data["fingerprint"]


@pytest.mark.parametrize("trace", [True, False])
def test_plan_is_the_cli_json(local, capsys, trace):
    r = local.post("/v1/plan", params={"trace": str(trace).lower()},
                   json={"config": LLAMA, "node": {"device": "B200"}})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    argv = ["plan", "--device", "B200", "--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8", "--json"]
    expected = cli_json(capsys, *argv, *([] if trace else ["--no-trace"]))
    assert r.json() == wire(expected)
    assert ("trace" in r.json()) is trace
    assert r.json()["plan"]["decode"]["backend"] == "trtllm-gen"


def test_plan_declared_node_flags_match_cli(local, capsys):
    body = {"config": LLAMA, "node": {"capability": "10.3", "flashinfer_version": "0.6.7", "cubins": "missing"}}
    r = local.post("/v1/plan", json=body)
    expected = cli_json(capsys, "plan", "--capability", "10.3", "--flashinfer-version", "0.6.7", "--cubins", "missing",
                        "--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8", "--json")
    assert r.status_code == 200 and r.json() == wire(expected)


def test_rejection_is_200_with_rule_ids_and_suggestions(local):
    # vLLM 0.33 serves NVFP4 KV through fa2 on 12.x, but not at head_dim 64 (_nvfp4_kv_on_fa2): an
    # engine rule only - fa2 itself reads NVFP4 at head 64 (attnplan verify on the H100).
    config = {**LLAMA, "head_dim": 64, "kv_cache_dtype": "nvfp4"}
    r = local.post("/v1/plan", json={"config": config, "node": {"device": "RTX PRO 6000"}})
    assert r.status_code == 200
    a = r.json()
    assert a["status"] == "rejected" and a["plan"] is None
    assert "vllm.nvfp4" in {v["rule"] for v in a["violations"]}
    assert {v["layer"] for v in a["violations"] if v["rule"] == "vllm.nvfp4"} == {"engine"}
    assert any(s["field"] == "kv_cache_dtype" for s in a["suggestions"])
    # seed 003's own config (head_dim 128) is what vLLM 0.33 with FlashInfer 0.7.2 now serves
    ok = local.post("/v1/plan", json={"config": {**LLAMA, "kv_cache_dtype": "nvfp4"},
                                      "node": {"device": "RTX PRO 6000"}}).json()
    assert ok["status"] == "ok" and ok["plan"]["prefill"]["backend"] == "fa2"


# -- the engine layer ----------------------------------------------------------------------------
def test_engine_in_the_body_picks_the_layer_and_keys_the_cache(local, capsys):
    h100 = {"config": LLAMA, "node": {"device": "H100"}}
    default = local.post("/v1/plan", json=h100).json()
    kernel = local.post("/v1/plan", json={**h100, "engine": "flashinfer"}).json()
    pinned = local.post("/v1/plan", json={**h100, "engine": "vllm==0.33.0"}).json()
    # vLLM 0.33 decodes with XQA on 9.0 (supports_trtllm_attention); the kernel layer's own order
    # prefers fa2 decode there. Asked in turn on one app, so a cache keyed without the engine
    # would have answered all three alike.
    assert default["plan"]["decode"]["backend"] == "xqa" and default["engine"]["name"] == "vllm"
    assert kernel["plan"]["decode"]["backend"] == "fa2" and kernel["engine"]["name"] == "flashinfer"
    assert pinned["engine"] == {"name": "vllm", "version": "0.33.0"} and pinned["plan"] == default["plan"]
    assert kernel == wire(cli_json(capsys, "plan", "--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8",
                                   "--device", "H100", "--engine", "flashinfer", "--json"))
    assert local.post("/v1/plan", json=h100).json() == default  # the cached default is still the default's


@pytest.mark.parametrize("engine", ["vllm==0.1.0", "sglang==0.4.0", "flashinfer==0.7.2"])
def test_uncovered_engine_is_422_naming_the_field_and_the_covered_engines(local, engine):
    r = local.post("/v1/plan", json={"config": LLAMA, "node": {"device": "H100"}, "engine": engine})
    assert fields(r) == ["engine"]
    msg = r.json()["detail"][0]["msg"]
    assert "vllm==0.33.0" in msg and "flashinfer" in msg


def test_empty_engine_is_422(local):
    assert fields(local.post("/v1/plan", json={"config": LLAMA, "engine": ""})) == ["engine"]
    assert fields(local.post("/v1/plan", json={"config": LLAMA, "engine": 3})) == ["engine"]


def test_matrix_per_engine(local):
    vllm = local.get("/v1/matrix", params={"engine": "vllm"}).json()
    kernel = local.get("/v1/matrix", params={"engine": "FlashInfer"}).json()
    assert vllm["engine"] == "vllm==0.33.0" and kernel["engine"] == "flashinfer"
    assert vllm["rows"] != kernel["rows"]
    assert kernel["rows"] == json.loads(json.dumps(capability_matrix(engine="flashinfer"), default=str))
    assert local.get("/v1/matrix").json()["rows"] == vllm["rows"]  # absent: the default layer
    md = local.get("/v1/matrix", params={"format": "markdown", "engine": "flashinfer"})
    assert md.text == matrix_markdown(engine="flashinfer")
    assert fields(local.get("/v1/matrix", params={"engine": "sglang==0.4.0"})) == ["engine"]


def test_plan_without_node_uses_the_served_node(local, authed):
    a = local.post("/v1/plan", json={"config": LLAMA}).json()
    assert a["node"]["hostname"]["source"] == "measured"  # this machine (no GPU: rejected)
    assert a["status"] == "rejected" and "device.cuda" in {v["rule"] for v in a["violations"]}
    b = authed.post("/v1/plan", json={"config": LLAMA}, headers=bearer()).json()
    assert b["status"] == "ok" and b["node"]["gpu_name"]["value"] == "B200"


def test_rules_and_matrix_match_the_cli(local):
    assert local.get("/v1/rules").json() == json.loads(json.dumps(rules_json(default_ruleset()), default=str))
    m = local.get("/v1/matrix")
    assert m.status_code == 200 and m.json()["rules_revision"] == default_ruleset().revision and m.json()["rows"]
    md = local.get("/v1/matrix", params={"format": "markdown"})
    assert md.headers["content-type"].startswith("text/markdown") and md.text == matrix_markdown()
    assert fields(local.get("/v1/matrix", params={"format": "xml"})) == ["format"]


def test_devices(local):
    names = [d["name"] for d in local.get("/v1/devices").json()["devices"]]
    assert "B200" in names and "H100" in names


def test_presets_from_a_directory(tmp_path):
    (tmp_path / "tiny.json").write_text(json.dumps({"num_attention_heads": 8, "num_key_value_heads": 2,
                                                     "hidden_size": 1024, "torch_dtype": "bfloat16"}))
    (tmp_path / "broken.json").write_text("{not json")
    with BackgroundServer(create_app(node=simulated_node("H100"), examples_dir=tmp_path)) as srv:
        data = httpx.get(srv.url + "/v1/presets").json()
    assert data["presets"] == [{"name": "tiny", "fields": fields_from_hf(json.loads((tmp_path / "tiny.json").read_text()))}]
    assert len(data["errors"]) == 1 and data["errors"][0].startswith("broken.json") and str(tmp_path) not in data["errors"][0]


def test_status_page_and_static_are_self_contained(local):
    page = local.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "http://" not in page.text and "https://" not in page.text  # no CDN
    js = local.get("/static/app.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"] and "innerHTML" not in js.text
    assert local.get("/static/../api/app.py").status_code == 404
    assert local.get("/static/nope.js").status_code == 404


def test_openapi_and_docs(local, authed):
    schema = local.get("/openapi.json").json()
    assert {"/v1/plan", "/v1/node", "/v1/rules", "/v1/matrix", "/healthz", "/readyz", "/metrics"} <= set(schema["paths"])
    assert "securitySchemes" not in schema.get("components", {})
    engine = schema["components"]["schemas"]["PlanRequest"]["properties"]["engine"]
    assert "flashinfer" in engine["description"] and "engine" not in schema["components"]["schemas"]["PlanRequest"].get("required", [])
    assert "engine" in {p["name"] for p in schema["paths"]["/v1/matrix"]["get"]["parameters"]}
    assert local.get("/docs").status_code == 404  # off unless `serve --docs DIR` (no CDN on this origin)
    secured = authed.get("/openapi.json").json()
    assert secured["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert secured["paths"]["/v1/plan"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in secured["paths"]["/healthz"]["get"]


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("body, expected", [
    ({"config": {**LLAMA, "bogus": 1}}, ["config.bogus"]),
    ({"config": LLAMA, "extra": True}, ["extra"]),
    ({"config": LLAMA, "node": {"device": "B200", "gpu": "x"}}, ["node.gpu"]),
    ({"config": {**LLAMA, "head_dim": "abc"}}, ["config.head_dim"]),
    ({"config": {**LLAMA, "head_dim": [128]}}, ["config.head_dim"]),
    ({"config": {**LLAMA, "sinks": "yes"}}, ["config.sinks"]),
    ({"config": {**LLAMA, "dtype": 16}}, ["config.dtype"]),
    ({"config": {**LLAMA, "kv_cache_dtype": "int3"}}, ["config.kv_cache_dtype"]),
    ({"config": {**LLAMA, "head_dim": 10 ** 30}}, ["config.head_dim"]),
    ({"config": {**LLAMA, "num_qo_heads": -1, "page_size": 0}}, ["config.num_qo_heads", "config.page_size"]),
    ({"config": {**LLAMA, "logits_soft_cap": 1e308}}, ["config.logits_soft_cap"]),
    ({"config": {"num_qo_heads": 32}}, ["config"]),
    ({"node": {"device": "B200"}}, ["config"]),
    ({"config": LLAMA, "node": {"device": "B2OO"}}, ["node.device"]),
    ({"config": LLAMA, "node": {"capability": "banana"}}, ["node.capability"]),
    ({"config": LLAMA, "node": {"device": "B200", "capability": "9.0"}}, ["node.capability"]),
    ({"config": LLAMA, "node": {"device": "B200", "flashinfer_version": "not a version"}}, ["node.flashinfer_version"]),
    ({"config": LLAMA, "node": {"device": "B200", "cubins": "maybe"}}, ["node.cubins"]),
    ({"config": LLAMA, "node": {}}, ["node.device"]),
    ({"config": LLAMA, "node": {"capability": 10.3}}, ["node.capability"]),
])
def test_invalid_body_is_422_naming_each_field(local, body, expected):
    r = local.post("/v1/plan", json=body)
    assert sorted(fields(r)) == sorted(expected)
    assert all(set(e) == {"loc", "field", "msg", "type"} for e in r.json()["detail"])


@pytest.mark.parametrize("raw", [b'{"config": {"head_dim": 128,', b"", b"[]", b'"x"', b"null", b"{}", b"\xff\xfe\x00",
                                 b'{"config": NaN}', b'{"config": {"head_dim": 1e999, "num_qo_heads": 1}}'])
def test_malformed_json_is_a_4xx_json_error(local, raw):
    r = local.post("/v1/plan", content=raw, headers={"content-type": "application/json"})
    # 422 names the body; bytes that are not UTF-8 never reach the JSON parser: 400.
    assert r.status_code == (400 if raw.startswith(b"\xff") else 422), r.text
    assert r.json()["detail"] and "Traceback" not in r.text


def test_huge_integer_literal_is_400_not_500(local):
    raw = b'{"config": {"head_dim": ' + b"9" * 5000 + b', "num_qo_heads": 1}}'
    r = local.post("/v1/plan", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {"detail": "There was an error parsing the body"}


@pytest.mark.parametrize("junk", ["\ud800", "\u202e\u0000\uffff", "\U0001f4a5" * 100, "é" * 1000])
def test_unicode_junk(local, junk):
    for body in ({"config": {**LLAMA, "dtype": junk}}, {"config": {**LLAMA, junk: 1}},
                 {"config": LLAMA, "node": {"device": junk[:100]}}):
        raw = json.dumps(body).encode()  # ASCII-escaped, so lone surrogates survive the trip
        r = local.post("/v1/plan", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        r.json()


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
def test_wrong_content_type_is_415(local, ctype):
    headers = {"content-type": ctype} if ctype else {}
    r = local.post("/v1/plan", content=json.dumps({"config": LLAMA}), headers=headers)
    assert r.status_code == 415 and "application/json" in r.json()["detail"]


@pytest.mark.parametrize("ctype", ["application/json; charset=utf-8", "application/vnd.attnplan+json"])
def test_json_content_types_are_accepted(local, ctype):
    r = local.post("/v1/plan", content=json.dumps({"config": LLAMA}), headers={"content-type": ctype})
    assert r.status_code == 200 and r.json()["status"] in ("ok", "rejected")


def test_query_params_are_validated(local):
    assert fields(local.get("/v1/node", params={"refresh": "maybe"})) == ["refresh"]
    assert fields(local.post("/v1/plan", params={"trace": "2"}, json={"config": LLAMA})) == ["trace"]


def test_body_over_64k_is_413_by_content_length(local):
    big = json.dumps({"config": LLAMA, "pad": "x" * MAX_BODY_BYTES}).encode()
    r = local.post("/v1/plan", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"].startswith("request body over")


def test_body_over_64k_is_413_when_streamed_without_length(local):
    def chunks():
        yield b'{"config": {"head_dim": 128, "num_qo_heads": 32}, "pad": "'
        for _ in range(80):
            yield b"x" * 1024
        yield b'"}'

    r = local.post("/v1/plan", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers and r.status_code == 413


def test_streamed_body_under_the_limit_is_served(local):
    def chunks():
        yield b'{"config": {"head_dim": 128, '
        yield b'"num_qo_heads": 32}, "node": {"device": "H100"}}'

    r = local.post("/v1/plan", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["plan"]["prefill"]["backend"] == "fa3"


def test_body_just_under_the_limit_is_parsed(local):
    body = json.dumps({"config": LLAMA, "node": {"device": "H100"}}).encode()
    padded = body[:-1] + b" " * (MAX_BODY_BYTES - len(body)) + b"}"
    assert len(padded) == MAX_BODY_BYTES
    r = local.post("/v1/plan", content=padded, headers={"content-type": "application/json"})
    assert r.status_code == 200


def test_404_and_405_are_json(local):
    r = local.get("/v1/nope")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    r = local.get("/v1/plan")
    assert r.status_code == 405 and "POST" in r.headers["allow"] and r.json() == {"detail": "Method Not Allowed"}
    assert local.post("/healthz").status_code == 405


def test_internal_errors_carry_no_traceback(monkeypatch):
    app = create_app(node=simulated_node("B200"))

    def boom(*_a, **_k):
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(app.state.attnplan, "plan", boom)
    with BackgroundServer(app, log_level="critical") as srv:
        r = httpx.post(srv.url + "/v1/plan", json={"config": LLAMA})
    assert r.status_code == 500 and r.json() == {"detail": "internal server error"}
    assert "secret" not in r.text and "Traceback" not in r.text


# -- auth --------------------------------------------------------------------------------------
def test_auth_required_everywhere_but_health_and_page(authed):
    for path in ("/v1/node", "/v1/rules", "/v1/matrix", "/v1/presets", "/v1/devices", "/metrics", "/v1/nope"):
        r = authed.get(path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"].startswith("Bearer") and r.json() == {"detail": "missing or invalid bearer token"}
    assert authed.post("/v1/plan", json={"config": LLAMA}).status_code == 401
    for path in ("/healthz", "/readyz", "/", "/static/app.js", "/openapi.json"):
        assert authed.get(path).status_code == 200, path


@pytest.mark.parametrize("header", ["Bearer wrong", "Bearer", "Basic " + TOKEN, TOKEN, "Bearer " + TOKEN + "x",
                                    "Bearer " + TOKEN[:-1]])
def test_wrong_credentials_are_401(authed, header):
    r = authed.get("/v1/node", headers={"Authorization": header.encode("utf-8")})
    assert r.status_code == 401 and TOKEN not in r.text


def test_refused_requests_are_labelled_by_their_route(authed):
    authed.get("/v1/node")
    authed.post("/v1/plan", content=b"x" * (MAX_BODY_BYTES + 1), headers=bearer())
    text = authed.get("/metrics", headers=bearer()).text
    assert 'attnplan_http_requests_total{method="GET",route="/v1/node",status="401"}' in text
    assert 'attnplan_http_requests_total{method="POST",route="/v1/plan",status="413"}' in text


def test_right_token_works(authed):
    assert authed.get("/v1/node", headers=bearer()).json()["node"]["gpu_name"]["value"] == "B200"
    assert authed.get("/v1/node", headers={"Authorization": ("bearer " + TOKEN).encode()}).status_code == 200
    r = authed.post("/v1/plan", json={"config": LLAMA}, headers=bearer())
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_unauthenticated_oversized_body_never_reaches_the_parser(authed):
    r = authed.post("/v1/plan", content=b"{" * (MAX_BODY_BYTES + 10), headers={"content-type": "application/json"})
    assert r.status_code == 401


def test_loopback_rules():
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "example.com", "", "127.0.0.1.example.com"):
        assert not is_loopback(host), host
    assert resolve_token(None, {"ATTNPLAN_TOKEN": "a"}) == "a"
    assert resolve_token("b", {"ATTNPLAN_TOKEN": "a"}) == "b"
    assert resolve_token("", {"ATTNPLAN_TOKEN": ""}) is None


# -- metrics ------------------------------------------------------------------------------------
def test_metrics_by_route_template(local):
    local.post("/v1/plan", json={"config": LLAMA, "node": {"device": "H100"}})
    local.post("/v1/plan", json={"config": LLAMA, "node": {"device": "H100"}, "engine": "flashinfer"})
    local.post("/v1/plan", json={"config": {**LLAMA, "bogus": 1}})
    local.get("/some/random/path/12345")
    text = local.get("/metrics").text
    assert 'attnplan_http_requests_total{method="POST",route="/v1/plan",status="200"}' in text
    assert 'attnplan_http_requests_total{method="POST",route="/v1/plan",status="422"}' in text
    assert 'route="unmatched"' in text and "12345" not in text
    assert 'attnplan_http_request_seconds_bucket{le="0.005",route="/v1/plan"}' in text
    # H100: vLLM 0.33 decodes with XQA (artifactory assumed reachable); the kernel layer with fa2
    assert 'attnplan_plans_total{decode="xqa",prefill="fa3",status="ok"}' in text
    assert 'attnplan_plans_total{decode="fa2",prefill="fa3",status="ok"}' in text
    assert 'attnplan_plans_total{decode="none",prefill="none",status="rejected"}' in text
    assert "attnplan_probe_failures_total 0.0" in text
    assert 'attnplan_artifactory_checks_total{result="reachable"} 0.0' in text


def test_each_app_has_its_own_registry():
    a, b = create_app(node=simulated_node("B200")), create_app(node=simulated_node("H100"))
    assert a.state.attnplan.metrics.registry is not b.state.attnplan.metrics.registry


# -- readiness and the background probe ------------------------------------------------------------
def test_slow_probe_makes_readyz_say_why_without_hanging():
    release = threading.Event()

    def slow_probe():
        release.wait(30)
        return probe_node(safe_io(), check_artifactory_now=False)

    app = create_app(node_cache=NodeCache(slow_probe), probe_deadline=0.3)
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, timeout=3) as c:
        t0 = time.monotonic()
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["ready"] is False and r.json()["reason"].startswith("probing since")
        p = c.post("/v1/plan", json={"config": LLAMA})
        assert p.status_code == 503 and "probing since" in p.json()["detail"] and p.headers["retry-after"] == "1"
        assert c.get("/v1/node").status_code == 503
        # a declared node does not need the probe
        assert c.post("/v1/plan", json={"config": LLAMA, "node": {"device": "B200"}}).status_code == 200
        assert c.get("/healthz").status_code == 200
        assert time.monotonic() - t0 < 2
        time.sleep(0.5)
        assert "attnplan_probe_failures_total 1.0" in c.get("/metrics").text  # overran its deadline
        assert c.get("/readyz").status_code == 503
        release.set()
        wait_ready(c)
        assert c.get("/v1/node").status_code == 200


def test_failing_probe_is_reported_and_counted():
    def broken():
        raise RuntimeError("NVML exploded")

    with BackgroundServer(create_app(node_cache=NodeCache(broken))) as srv, httpx.Client(base_url=srv.url) as c:
        deadline = time.monotonic() + 5
        while "probe failed" not in (reason := c.get("/readyz").json()["reason"]):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert c.get("/readyz").status_code == 503 and "RuntimeError: NVML exploded" in reason
        assert "attnplan_probe_failures_total 1.0" in c.get("/metrics").text
        r = c.get("/v1/node", params={"refresh": "true"})
        assert r.status_code == 503 and "NVML exploded" in r.json()["detail"]


class _Artifactory(http.server.BaseHTTPRequestHandler):
    delay = 0.0

    def do_HEAD(self):  # noqa: N802 - http.server's naming
        time.sleep(self.delay)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def artifactory():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Artifactory)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    _Artifactory.delay = 0.0


def b200_io(url: str, name: str = "NVIDIA B200", capability: int = 100) -> ProbeIO:
    gpu = {"count": 1, "name": name, "capability": capability, "memory_gib": 179.0, "driver": "580.1", "mig": False}
    return ProbeIO(nvml=lambda: gpu, env={"FLASHINFER_CUBINS_REPOSITORY": url, "ATTNPLAN_ARTIFACTORY_CHECK": "auto"})


# 10.0: trtllm-gen loads cubins from the artifactory; 9.0: vLLM 0.33 gates XQA decode on the same
# check (supports_trtllm_attention), so an H100 is checked too (policy.needs_artifactory_check).
@pytest.mark.parametrize("name, capability, decode", [("NVIDIA B200", 100, "trtllm-gen"), ("NVIDIA H100 80GB HBM3", 90, "xqa")])
def test_artifactory_checked_in_background_on_a_ttl(artifactory, name, capability, decode):
    url = f"http://127.0.0.1:{artifactory.server_address[1]}/"
    app = create_app(probe_io=b200_io(url, name, capability), artifactory_ttl=0.2, artifactory_timeout=2)
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url) as c:
        wait_ready(c)
        deadline = time.monotonic() + 5
        while c.get("/v1/node").json()["node"]["artifactory_reachable"]["value"] is not True:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        fact = c.get("/v1/node").json()["node"]["artifactory_reachable"]
        assert fact == {"value": True, "source": "measured", "detail": "HTTP 200"}
        time.sleep(0.6)
        text = c.get("/metrics").text
        count = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith('attnplan_artifactory_checks_total{result="reachable"}')][0]
        assert count >= 2  # refreshed on its TTL
        answer = c.post("/v1/plan", json={"config": LLAMA}).json()
        assert answer["status"] == "ok" and answer["plan"]["decode"]["backend"] == decode


def test_slow_artifactory_never_sits_on_a_request(artifactory):
    _Artifactory.delay = 3.0
    url = f"http://127.0.0.1:{artifactory.server_address[1]}/"
    app = create_app(probe_io=b200_io(url), artifactory_timeout=5)
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, timeout=2) as c:
        wait_ready(c)
        t0 = time.monotonic()
        fact = c.get("/v1/node").json()["node"]["artifactory_reachable"]
        c.post("/v1/plan", json={"config": LLAMA})
        assert time.monotonic() - t0 < 1.0
        assert fact["source"] == "unknown" and "background" in fact["detail"]


# -- concurrency ------------------------------------------------------------------------------------
def test_concurrent_requests(local):
    bodies = [{"config": LLAMA, "node": {"device": d}} for d in ("B200", "H100", "GB300", "L40S", "A100")]
    expected = {d["node"]["device"]: local.post("/v1/plan", json=d).json() for d in bodies}

    def one(i: int) -> bool:
        body = bodies[i % len(bodies)]
        with httpx.Client(base_url=str(local.base_url), timeout=20) as c:
            r = c.post("/v1/plan", json=body)
            return r.status_code == 200 and r.json() == expected[body["node"]["device"]]

    with ThreadPoolExecutor(32) as pool:
        assert all(pool.map(one, range(200)))


# -- `attnplan serve` --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_refuses_non_loopback_without_token(capsys, monkeypatch):
    monkeypatch.delenv("ATTNPLAN_TOKEN", raising=False)
    assert cli_main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "host" in err and "--token" in err and "Traceback" not in err


def test_serve_bad_inputs_exit_2(capsys):
    assert cli_main(["serve", "--device", "B2OO"]) == 2
    assert "unknown device" in capsys.readouterr().err
    assert cli_main(["serve", "--port", "70000"]) == 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert cli_main(["serve", "--port", str(s.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert "port" in err and "Traceback" not in err


def test_serve_subprocess_declared_device_with_env_token():
    port = free_port()
    env = {**os.environ, **SAFE_ENV, "ATTNPLAN_TOKEN": "from-env"}
    proc = subprocess.Popen([sys.executable, "-m", "attnplan", "serve", "--device", "GB300", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        assert httpx.get(url + "/v1/node").status_code == 401
        r = httpx.get(url + "/v1/node", headers={"Authorization": "Bearer from-env"})
        assert r.json()["node"]["gpu_name"]["value"] == "GB300"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert b"from-env" not in out  # the token is never logged (the access log is on)
    assert b"GET /v1/node" in out
    assert f"attnplan listening on http://127.0.0.1:{port} (declared node GB300; bearer token required)".encode() in out

"""Issue 40 #5: one REST contract for every route.

One request-body policy (rest/bodies.py): strict types (``/v1/compare`` took ``tp: true``, ``"2"``,
``2.5``), duplicate JSON keys refused everywhere (``/v1/plan`` kept the last), and no error repeats the
client's input. After a 500 the next request on the same keep-alive connection is answered (uvicorn
closed the connection when Starlette re-raised). One preset registry: a preset ``/v1/presets`` lists
plans on ``/v1/plan``, ``/v1/plan/serve`` and ``/v1/compare``, and so does a shipped one.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attnplan.policy import simulated_node
from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer

ROOT = Path(__file__).resolve().parents[1]
MARK = "ECHO-7d3a9b"
CONFIG = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(node=simulated_node("H100")), raise_server_exceptions=False) as c:
        yield c


def post(c, path, body=None, raw=None, ctype="application/json"):
    data = raw if raw is not None else json.dumps(body)
    return c.post(path, content=data, headers={"content-type": ctype})


@pytest.mark.parametrize("value", [True, "2", 2.5, None, [2], {"n": 2}])
def test_compare_takes_strict_integers_as_plan_does(client, value):
    r = post(client, "/v1/compare", {"model": "llama-3.1-8b", "devices": ["H100"], "tp": value})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "tp", r.text
    r = post(client, "/v1/plan", {"model": "llama-3.1-8b", "tensor_parallel_size": value})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "tensor_parallel_size", r.text


@pytest.mark.parametrize("path,raw", [
    ("/v1/plan", '{"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}, "engine": "vllm", "engine": "x"}'),
    ("/v1/plan", '{"config": {"head_dim": 64, "head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}}'),
    ("/v1/plan", '{"model": "llama-3.1-8b", "model": "gemma-2-9b"}'),
    ("/v1/compare", '{"model": "llama-3.1-8b", "devices": ["H100"], "tp": 1, "tp": 2}'),
    ("/v1/plan/serve", '{"line": "vllm serve llama-3.1-8b", "line": "vllm serve gemma-2-9b"}'),
])
def test_duplicate_keys_are_refused_on_every_route(client, path, raw):
    r = post(client, path, raw=raw)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body", r.text
    assert "duplicate" in r.text


@pytest.mark.parametrize("path,raw", [("/v1/plan", '{"config": {"head_dim": NaN}}'),
                                      ("/v1/compare", '{"model": "llama-3.1-8b", "devices": ["H100"], "tp": Infinity}'),
                                      ("/v1/plan/serve", '{"line": NaN}')])
def test_non_json_numbers_are_refused_on_every_route(client, path, raw):
    r = post(client, path, raw=raw)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "body", r.text


ECHO_CASES = [
    ("/v1/plan", {"model": MARK}),
    ("/v1/plan", {"model": f"acme/{MARK}"}),
    ("/v1/plan", {"model": {"model_type": "llama", "num_attention_heads": MARK}}),
    ("/v1/plan", {"config": CONFIG, "node": {"device": MARK}}),
    ("/v1/plan", {"config": CONFIG, "engine": MARK}),
    ("/v1/plan", {"model": "llama-3.1-8b", "kv_cache_dtype": MARK}),
    ("/v1/plan", {"model": "llama-3.1-8b", "attention_backend": MARK}),
    ("/v1/plan", {"model": "llama-3.1-8b", "revision": f"/{MARK}"}),
    ("/v1/compare", {"model": MARK, "devices": ["H100"]}),
    ("/v1/compare", {"model": "llama-3.1-8b", "devices": [MARK]}),
    ("/v1/compare", {"model": "llama-3.1-8b", "devices": ["H100"], "kv_cache_dtype": MARK}),
    ("/v1/compare", {"config_json": {"model_type": "llama", "num_attention_heads": MARK}, "devices": ["H100"]}),
    ("/v1/plan/serve", {"line": f"vllm serve {MARK}"}),
    ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --kv-cache-dtype {MARK}"}),
    ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --no-such-flag {MARK}"}),
    ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b -tp {MARK}"}),
    ("/v1/plan/serve", {"line": f"vllm serve llama-3.1-8b --hf-overrides [\"{MARK}\"]"}),
    ("/v1/plan/serve", {"line": "vllm serve llama-3.1-8b", "node": {"device": MARK}}),
]


@pytest.mark.parametrize("path,body", ECHO_CASES)
def test_errors_never_repeat_the_clients_input(client, path, body):
    r = post(client, path, body)
    assert r.status_code == 422, r.text
    assert MARK not in r.text, r.text


def test_text_plain_serve_lines_are_not_echoed_either(client):
    r = post(client, "/v1/plan/serve", raw=f"vllm serve llama-3.1-8b --kv-cache-dtype {MARK}", ctype="text/plain")
    assert r.status_code == 422 and MARK not in r.text, r.text


def test_a_500_leaves_the_keep_alive_connection_usable():
    app = create_app(node=simulated_node("H100"))

    @app.get("/v1/crash-for-test")
    def crash() -> None:
        raise RuntimeError("a bug")

    with BackgroundServer(app) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        for _ in range(2):
            conn.request("GET", "/v1/crash-for-test")
            r = conn.getresponse()
            assert r.status == 500 and json.loads(r.read()) == {"detail": "internal server error"}
            conn.request("POST", "/v1/plan", body=json.dumps({"config": CONFIG}),
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["status"] in ("ok", "rejected")
        conn.close()


def test_one_preset_registry_for_every_route(tmp_path):
    custom = json.loads((ROOT / "attnplan" / "presets" / "llama-3.1-8b.json").read_text())
    custom["num_key_value_heads"] = 4
    (tmp_path / "my-llama.json").write_text(json.dumps(custom))
    (tmp_path / "broken.json").write_text("{nope")
    with TestClient(create_app(node=simulated_node("H100"), examples_dir=tmp_path),
                    raise_server_exceptions=False) as c:
        listed = [p["name"] for p in c.get("/v1/presets").json()["presets"]]
        assert listed == ["my-llama"]
        for name in ("my-llama", "llama-3.1-8b"):  # the service's own, and a shipped one
            r = post(c, "/v1/plan", {"model": name})
            assert r.status_code == 200, (name, r.text)
            r = post(c, "/v1/plan/serve", {"line": f"vllm serve {name} -tp 2"})
            assert r.status_code == 200, (name, r.text)
            r = post(c, "/v1/compare", {"model": name, "devices": ["H100"]})
            assert r.status_code == 200, (name, r.text)
        kv = post(c, "/v1/plan", {"model": "my-llama"}).json()
        assert "num_kv_heads" in json.dumps(kv) and '"num_kv_heads":4' in json.dumps(kv, separators=(",", ":"))
        for path, body in (("/v1/plan", {"model": "broken"}), ("/v1/compare", {"model": "broken", "devices": ["H100"]}),
                           ("/v1/plan/serve", {"line": "vllm serve broken"})):
            r = post(c, path, body)
            assert r.status_code == 422 and str(tmp_path) not in r.text, r.text

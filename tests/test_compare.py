"""attnplan compare / POST /v1/compare / the grid page (issue 26): vLLM 0.33 and SGLang 0.5.23 side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan import policy
from attnplan.model import config_from_hf
from attnplan.cli.main import main as cli_main
from attnplan.policy import simulated_node
from attnplan.sglang import SglangEngine, SglangFlags
from attnplan.compare import compare

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "examples" / "llama-3.1-8b.json")


def test_rows_are_each_engines_own_answer():
    rep = compare(LLAMA, ["H100", "B200"])
    assert [(r["device"], r["engine"]) for r in rep["rows"]] == [("H100", "vllm"), ("H100", "sglang"), ("B200", "vllm"), ("B200", "sglang")]
    cfg = config_from_hf(LLAMA)
    for r in rep["rows"]:
        engine = "vllm" if r["engine"] == "vllm" else SglangEngine(SglangFlags(architecture="LlamaForCausalLM"))
        a = policy.plan_for(cfg, simulated_node(r["device"]), engine=engine)
        assert (r["prefill"]["flashinfer"], r["decode"]["flashinfer"]) == a.backends()
        assert r["page_size"]["runs"] == a.plan.kv_cache.page_size
        if r["engine"] == "sglang":
            assert r["decode"]["engine_backend"] == a.engine_phases["decode"].name
            assert [c["rule"] for c in r["coercions"]] == [c.rule for c in a.coercions]


def test_cli_prints_a_row_per_gpu_and_engine(capsys):
    rc = cli_main(["compare", LLAMA, "--device", "H100,B200,RTX PRO 6000"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith(("H100", "B200", "RTX PRO 6000"))]
    assert len(lines) == 6
    assert "fa3 (not FlashInfer" in next(ln for ln in lines if ln.startswith("H100") and "sglang" in ln)
    assert "trtllm_mha -> FlashInfer trtllm-gen" in next(ln for ln in lines if ln.startswith("B200") and "sglang" in ln)
    assert "coerced page_size unset -> 64 [sglang.trtllm-mha-page]" in out


def test_cli_refusal_is_exit_1_and_names_the_phase(capsys):
    rc = cli_main(["compare", LLAMA, "--device", "H100", "--kv-cache-dtype", "nvfp4", "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    sg = next(r for r in rows if r["engine"] == "sglang")
    assert rc == 1 and sg["status"] == "fails-at-startup" and sg["verdict"]["rules"] == ["sglang.nvfp4-capability"]
    assert {"rule": "sglang.nvfp4-capability", "outcome": "startup"}.items() <= sg["refusals"][0].items()


@pytest.mark.parametrize("argv", [["--device", "H999"], ["--device", "H100", "--kv-cache-dtype", "mxfp8"], ["--device", ""]])
def test_cli_bad_input_is_exit_2(capsys, argv):
    assert cli_main(["compare", LLAMA, *argv]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.fixture
def client():
    from fastapi.testclient import TestClient

    from attnplan.rest.app import create_app

    return TestClient(create_app(node=simulated_node("H100")))


def test_rest_compare_matches_the_library(client):
    r = client.post("/v1/compare", json={"model": "llama-3.1-8b", "devices": ["H100", "B200"], "kv_cache_dtype": "fp8"})
    assert r.status_code == 200
    want = compare(str(ROOT / "attnplan" / "presets" / "llama-3.1-8b.json"), ["H100", "B200"], kv_cache_dtype="fp8")
    assert r.json()["rows"] == json.loads(json.dumps(want["rows"], default=str))


@pytest.mark.parametrize("body,field", [
    ({"model": "../../etc/passwd", "devices": ["H100"]}, "model"),
    ({"model": "llama-3.1-8b", "devices": ["H999"]}, "devices"),
    ({"model": "llama-3.1-8b", "devices": []}, "devices"),
    ({"devices": ["H100"]}, "body"),
    ({"model": "llama-3.1-8b", "devices": ["H100"], "kv_cache_dtype": "mxfp8"}, "kv_cache_dtype"),
])
def test_rest_compare_bad_input_is_422_naming_the_field(client, body, field):
    r = client.post("/v1/compare", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field


def test_the_grid_page_is_served(client):
    page = client.get("/static/compare.html")
    assert page.status_code == 200 and "/static/compare.js" in page.text
    assert "/v1/compare" in client.get("/static/compare.js").text


@pytest.mark.parametrize("model", [LLAMA, "gemma-2-9b"], ids=["config-file", "preset"])
def test_the_model_is_read_once_per_compare(monkeypatch, planned_requests, model):
    # every (GPU, engine) row plans the one config.json read at the start (attnplan/compare.py): the reader is
    # spied, not timed; the rows' requests still name the model as given, as a pasted line's do
    import attnplan.model as model_pkg

    reads: list = []
    real = model_pkg.read_model_config

    def spy(path, *a, **kw):
        reads.append(str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(model_pkg, "read_model_config", spy)
    devices = ["H100", "B200", "RTX PRO 6000"]
    rep = compare(model, devices)
    assert len(reads) == 1, reads
    assert len(planned_requests) == len(devices) * 2 and {r.model for r in planned_requests} == {model}
    assert len(rep["commands"]) == len(devices) * 2 and rep["model"] == model

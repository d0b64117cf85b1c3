"""One parse of a backend name for the engine it is typed under (issue 40 class 1): a FlashInfer or vLLM name
under --engine sglang is SGLang's own name or bad input naming SGLang's - never a KeyError, on every path."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from attnplan.cli.main import main
from attnplan.engine_request import sglang_backend, with_backend
from attnplan.policy import InvalidInputError, default_ruleset, parse_engine, plan_for, simulated_node
from attnplan.rest.app import create_app

FLASHINFER_SPELLINGS = ["flashinfer", "FLASHINFER", "FLASHINFER_MLA", "flashinfer-mla"]


@pytest.mark.parametrize("name", FLASHINFER_SPELLINGS)
def test_flashinfer_spellings_are_sglangs_flashinfer(name, capsys):
    assert sglang_backend(name) == "flashinfer"
    rc = main(["plan", "--engine", "sglang==0.5.23", "--model", "gpt-oss-120b", "--attention-backend", name,
               "--device", "B200", "--json"])
    out, err = capsys.readouterr()
    v = json.loads(out)["verdict"]
    # SGLang refuses flashinfer for GPT-OSS at startup (its model override's backend whitelist)
    assert rc == 1 and v["outcome"] == "fails-at-startup" and v["rules"] == ["sglang.gpt-oss-backends"]


@pytest.mark.parametrize("name", ["FLASH_ATTN", "fa2-mla", "trtllm-gen", "nope"])
def test_a_name_sglang_does_not_take_exits_2_naming_its_own(name, capsys):
    rc = main(["plan", "--engine", "sglang", "--model", "gpt-oss-120b", "--attention-backend", name, "--device", "B200"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "trtllm_mha" in err and "Traceback" not in err


def test_sglangs_own_names_reach_its_resolver():
    spec, backend = with_backend(parse_engine("sglang", default_ruleset()), "trtllm_mha", "GptOssForCausalLM")
    assert backend is None and spec.request.flags.attention_backend == "trtllm_mha"
    assert spec.request.flags.architecture == "GptOssForCausalLM"
    a = plan_for({"head_dim": 64, "num_qo_heads": 64, "num_kv_heads": 8, "sinks": True}, simulated_node("B200"), engine=spec)
    assert a.verdict.selected.decode == "trtllm_mha"
    with pytest.raises(InvalidInputError):
        sglang_backend("FLASH_ATTN")


def test_a_forced_name_the_engine_does_not_force_is_no_candidate_not_a_keyerror():
    # the policy itself, without the entry points' translation: sglang.backend-names refuses it
    a = plan_for({"head_dim": 64, "num_qo_heads": 64, "num_kv_heads": 8, "attention_backend": "flashinfer"},
                 simulated_node("B200"), engine="sglang")
    assert not a.ok and "sglang.backend-names" in {v.rule for v in a.violations}


@pytest.mark.parametrize("body", [
    {"model": "gpt-oss-120b", "engine": "sglang==0.5.23", "attention_backend": "flashinfer"},
    {"model": "gpt-oss-120b", "engine": "sglang", "attention_backend": "FLASHINFER_MLA"},
    {"config": {"head_dim": 64, "num_qo_heads": 64, "num_kv_heads": 8, "attention_backend": "flashinfer"}, "engine": "sglang"},
    {"config": {"head_dim": 64, "num_qo_heads": 64, "num_kv_heads": 8, "attention_backend": "flashinfer-mla"},
     "engine": "sglang"},
])
def test_rest_answers_every_spelling(body):
    r = TestClient(create_app(node=simulated_node("B200"))).post("/v1/plan", json=body)
    assert r.status_code == 200 and r.json()["verdict"]["engine"].startswith("sglang")


def test_rest_refuses_a_name_sglang_does_not_take_without_echo():
    r = TestClient(create_app(node=simulated_node("B200"))).post(
        "/v1/plan", json={"model": "gpt-oss-120b", "engine": "sglang", "attention_backend": "FLASH_ATTN_SECRET"})
    assert r.status_code == 422 and "FLASH_ATTN_SECRET" not in r.text and "trtllm_mha" in r.text

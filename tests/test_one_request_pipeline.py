"""One request, one pipeline, one answer (issue 36 item 6).

``attnplan plan --model-config X [flags]`` and ``explain --model-config`` build the same request a pasted
``vllm serve`` / ``sglang launch_server`` line and a REST body build (attnplan/request.py ``ModelRequest``) and go
through the same pipeline (``plan_request``): spied here, and their answers compared with the serve line's, the
launch line's and ``POST /v1/plan``'s, verdict and plan JSON alike. ``attnplan compare`` plans each engine's command
as that request too (attnplan/compare.py): a row is the serve / launch line's answer; a split the engine refuses is
its fails-at-startup (exit 1) on ``plan`` as on ``vllm serve``.

The rejection error (attnplan/errors.py ``UnsupportedConfigurationError``) carries the data and takes the verdict's
sentence from the surface that raises it (render/verdict.py words it); below the renderer it names the deciding
rule, the fact and the fix from the answer's data alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import attnplan
import attnplan.request as vreq
from attnplan import policy
from attnplan.cli.main import main
from attnplan.policy import simulated_node
from attnplan.rest.app import create_app

ROOT = Path(__file__).resolve().parents[1]
GEMMA3 = str(ROOT / "tests" / "models" / "gemma-3-27b-it.json")

# (model, device, plan flags, vllm serve flags, REST body fields): a wrong-output verdict (Gemma-2's soft cap on
# B200), a non-FlashInfer backend that runs (DeepSeek-V3 -tp 8 on H100), a layered model with serve flags
CASES = [
    ("gemma-2-9b", "B200", [], [], {}),
    ("deepseek-v3", "H100", ["--tensor-parallel-size", "8"], ["-tp", "8"], {"tensor_parallel_size": 8}),
    (GEMMA3, "H100", ["--kv-cache-dtype", "fp8", "--tensor-parallel-size", "2"], ["--kv-cache-dtype", "fp8", "-tp", "2"],
     {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2}),
]


def _json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(list(argv))
    return rc, json.loads(capsys.readouterr().out)


@pytest.fixture
def spy(planned_requests):
    """Every ``plan_request`` call, with the request it planned (tests/conftest.py)."""
    return planned_requests


@pytest.mark.parametrize("command", ["plan", "explain"])
def test_model_config_is_planned_as_the_one_request(capsys, spy, command):
    rc, _ = _json(capsys, command, "--model-config", "deepseek-v3", "--device", "H100", "--tensor-parallel-size", "8",
                  "--kv-cache-dtype", "fp8", "--json")
    assert rc == 0
    assert len(spy) == 1, "plan/explain --model-config planned outside attnplan/request.py plan_request"
    req = spy[0]
    assert isinstance(req, vreq.ModelRequest)
    # the engine command's flags on the request's own fields, as a serve line sets them (request_from_fields)
    assert (req.model, req.tensor_parallel_size, req.kv_cache_dtype) == ("deepseek-v3", 8, "fp8")


def test_sglang_backend_rides_in_the_request_as_a_launch_line_s(capsys, spy):
    # under --engine sglang the backend is SGLang's own name: the request's attention_backend, as a launch line
    # sets it (lines.py), never an attention-config override
    rc, data = _json(capsys, "plan", "--model-config", "gemma-2-9b", "--device", "H100", "--engine", "sglang",
                     "--attention-backend", "triton", "--json", "--no-trace")
    assert rc == 0 and spy[0].attention_backend == "triton" and "attention_backend" not in spy[0].overrides
    assert data["verdict"]["selected"]["decode"] == "triton"


@pytest.mark.parametrize("model,device,plan_flags,serve_flags,body", CASES,
                         ids=["gemma-2-B200", "deepseek-v3-tp8-H100", "gemma-3-fp8-tp2-H100"])
def test_plan_serve_line_and_rest_body_give_one_answer(capsys, spy, model, device, plan_flags, serve_flags, body):
    rc_plan, plan = _json(capsys, "plan", "--model-config", model, "--device", device, *plan_flags, "--json", "--no-trace")
    rc_serve, serve = _json(capsys, "vllm", "serve", model, "--device", device, *serve_flags, "--json", "--no-trace")
    assert len(spy) == 2
    # the same request: the serve line's flags in vLLM's fields, plan's in attnplan's overrides, one line_fields
    assert spy[0].line_fields() == spy[1].line_fields() and spy[0].ranks == spy[1].ranks
    assert rc_plan == rc_serve == (0 if plan["verdict"]["outcome"] == "runs" else 1)
    assert plan["verdict"] == serve["verdict"] and plan == serve["per_rank"]

    client = TestClient(create_app(node=simulated_node(device)))
    m = json.loads(Path(model).read_text()) if model.endswith(".json") else model
    r = client.post("/v1/plan", params={"trace": "false"}, json={"model": m, **body})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["verdict"] == plan["verdict"] and r.json()["per_rank"] == plan


def test_plan_and_a_launch_line_give_one_answer(capsys, spy):
    rc_plan, plan = _json(capsys, "plan", "--model-config", "gpt-oss-120b", "--device", "B200", "--engine", "sglang",
                          "--tensor-parallel-size", "4", "--json", "--no-trace")
    rc_launch, launch = _json(capsys, "sglang", "launch_server", "--model-path", "gpt-oss-120b", "--tp", "4",
                              "--device", "B200", "--json", "--no-trace")
    assert len(spy) == 2 and rc_plan == rc_launch
    assert plan["verdict"] == launch["verdict"] and plan == launch["per_rank"]


@pytest.mark.parametrize("command", ["plan", "explain"])
def test_a_split_vllm_refuses_is_the_serve_line_s_answer(capsys, command):
    # the pipeline answers vLLM's own refusal: fails-at-startup, exit 1, as `vllm serve -tp 3` (issue 36 item 1)
    rc, data = _json(capsys, command, "--model-config", "gemma-2-9b", "--device", "H100", "--tensor-parallel-size", "3",
                     "--json")
    rc_serve, serve = _json(capsys, "vllm", "serve", "gemma-2-9b", "--device", "H100", "-tp", "3", "--json")
    assert rc == rc_serve == 1 and data["verdict"] == serve["verdict"]
    assert data["verdict"]["outcome"] == "fails-at-startup" and data["startup_error"] == serve["startup_error"]


# (model, device, tp, compare's --kv-cache-dtype, vLLM's spelling, SGLang's): a model of one group that runs, one
# computing wrong output on B200, a layered model with an fp8 cache, a split both engines refuse at startup
COMPARE_CASES = [
    ("llama-3.1-8b", "H100", 1, "auto", "auto", "auto"),
    ("gemma-2-9b", "B200", 1, "auto", "auto", "auto"),
    (GEMMA3, "H100", 2, "fp8", "fp8", "fp8_e4m3"),
    ("gemma-2-9b", "H100", 3, "bf16", "bfloat16", "bf16"),
]


@pytest.mark.parametrize("model,device,tp,kv,vllm_kv,sglang_kv", COMPARE_CASES,
                         ids=["llama-H100", "gemma-2-B200", "gemma-3-fp8-tp2", "gemma-2-tp3"])
def test_a_compare_row_is_the_serve_and_launch_answer(capsys, spy, model, device, tp, kv, vllm_kv, sglang_kv):
    # attnplan compare plans each engine's command as the one request (attnplan/compare.py): its rows say what
    # `vllm serve` and `sglang launch_server` say for the same command, verdict and per-rank plan alike
    from attnplan.compare import compare

    rep = compare(model, [device], tp=tp, kv_cache_dtype=kv)
    assert [r.engine for r in spy] == ["vllm", "sglang"], "compare planned outside attnplan/request.py plan_request"
    _rc, serve = _json(capsys, "vllm", "serve", model, "--device", device, "-tp", str(tp), "--kv-cache-dtype", vllm_kv,
                       "--json", "--no-trace")
    _rc, launch = _json(capsys, "sglang", "launch_server", "--model-path", model, "--tp", str(tp), "--kv-cache-dtype",
                        sglang_kv, "--device", device, "--json", "--no-trace")
    assert spy[2] == spy[0] and spy[3] == spy[1]   # the very request a pasted line builds
    for eng, line in (("vllm", serve), ("sglang", launch)):
        cmd = next(c for c in rep["commands"] if c["engine"] == eng)
        assert cmd["verdict"] == line["verdict"] and cmd["per_rank"] == line["per_rank"]
        rows = [r for r in rep["rows"] if r["engine"] == eng]
        if not any(r["group"] for r in rows):   # one attention group (or a refused split): the row is the command's
            assert [r["verdict"] for r in rows] == [line["verdict"]]
        assert {r["status"] for r in rows} >= {line["verdict"]["outcome"]}


def test_compare_says_what_the_engine_commands_say_of_a_split(capsys):
    # a split the engines refuse is their fails-at-startup (exit 1 for `vllm serve -tp 3`), not bad input (422)
    client = TestClient(create_app(node=simulated_node("H100")))
    r = client.post("/v1/compare", json={"model": "gemma-2-9b", "devices": ["H100"], "tp": 3})
    assert r.status_code == 200, r.text[:300]
    assert {row["status"] for row in r.json()["rows"]} == {"fails-at-startup"}
    assert main(["vllm", "serve", "gemma-2-9b", "-tp", "3", "--device", "H100"]) == 1
    capsys.readouterr()
    assert main(["compare", "gemma-2-9b", "--device", "H100", "--tp", "3"]) == 1      # the CLI says the same
    table = capsys.readouterr().out
    assert table.count("FAILS-AT-STARTUP") == 2 and "FlashInfer -" not in table   # a refused command plans nothing
    assert main(["compare", "gemma-2-9b", "--device", "H100", "--tp", "2"]) == 0


def test_an_unreadable_model_names_plan_s_flag(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    rc = main(["plan", "--model-config", str(bad), "--device", "H100"])
    assert rc == 2 and capsys.readouterr().err.count("model_config: ") == 1


# -- the rejection error carries the data; the sentence is the surface's -----------------------------------------
SOFTCAP = {"head_dim": 256, "num_qo_heads": 16, "num_kv_heads": 8, "logits_soft_cap": 30.0}


def _planner_error() -> attnplan.UnsupportedConfigurationError:
    with pytest.raises(attnplan.UnsupportedConfigurationError) as e:
        policy.require_plan(SOFTCAP, simulated_node("B200"))
    return e.value


def test_the_error_carries_verdict_violations_and_fixes():
    err = _planner_error()
    assert err.verdict is err.answer.verdict and err.verdict.outcome == "wrong-output"
    assert [v.rule for v in err.violations] == ["vllm.softcap-dropped"]
    assert err.fixes and all(f.args for f in err.fixes)
    text = str(err)
    # names the rule, its violation and every fix (the flags), from the data: no sentence of render's
    assert text.splitlines()[0].startswith("wrong-output: [vllm.softcap-dropped] ")
    assert all(f.args in text for f in err.fixes)


def test_the_surface_words_the_verdict():
    from attnplan.render.verdict import verdict_message

    low = _planner_error()
    sentence = verdict_message(low.verdict)
    assert sentence and sentence not in str(low)          # the planner's error holds no rendered sentence
    raised = attnplan.UnsupportedConfigurationError(low.answer, sentence)
    assert str(raised).splitlines()[0] == f"wrong-output: {sentence}"
    assert str(raised).splitlines()[1:] == str(low).splitlines()[1:]   # the same data beneath
    # the public require_plan raises with its finished answer: the same sentence
    with pytest.raises(attnplan.UnsupportedConfigurationError) as e:
        attnplan.require_plan(SOFTCAP, simulated_node("B200"))
    assert str(e.value).splitlines()[0] == f"wrong-output: {sentence}"


def test_an_unworded_violation_still_names_its_fact():
    # a violation whose sentence is render's to write (message empty, the facts as data) still says what failed
    low = _planner_error()
    v = low.violations[0].model_copy(update={"message": "", "fact": "page_size", "observed": 8, "required": "16, 32"})
    answer = low.answer.model_copy(update={"violations": (v,)})
    text = str(attnplan.UnsupportedConfigurationError(answer))
    assert "[vllm.softcap-dropped] page_size=8 (required 16, 32)" in text.splitlines()[0]
    assert "  - [vllm.softcap-dropped] both: page_size=8 (required 16, 32)" in text.splitlines()

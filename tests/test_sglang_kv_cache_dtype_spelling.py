"""Under SGLang a model request's ``--kv-cache-dtype`` is SGLang 0.5.23's own spelling, exactly (issue 36 item 5).

SGLang's server args take ``auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16``
(sglang/srt/arg_groups/fields/model.py ``kv_cache_dtype``: an argparse ``choices=`` list, exact). vLLM's spellings
(``fp8``, ``float16``) are not SGLang's: under ``--engine sglang`` they are bad input (exit 2, REST 422) in SGLang's
words, on every surface (``plan``/``explain --model-config``, ``preflight``, a launch line, ``compare``'s SGLang
row, ``POST /v1/plan``). The request keeps the engine's spelling and one function translates it
(attnplan/request.py ``cache_dtype``), so a request read twice (``engine_of``) reads the same.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attnplan.cli.main import main
from attnplan.policy import simulated_node
from attnplan.rest.app import create_app
from attnplan.sglang.flags import CHOICES, KV_DTYPES, KV_UNMODELLED

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "examples" / "llama-3.1-8b.json")

# sglang/srt/arg_groups/fields/model.py kv_cache_dtype choices (SGLang 0.5.23), in SGLang's order: attnplan's one
# copy (attnplan/sglang/flags.py), held to SGLang's source below
SGLANG_CHOICES = CHOICES
# vLLM 0.33 spellings SGLang refuses, and spellings neither takes
REFUSED = ["fp8", "float16", "fp8_e4m3fn", "FP8_E4M3"]


def _sglang_src() -> Path:
    from attnplan.oracle.sglang import SRC

    return SRC


@pytest.mark.skipif(not (_sglang_src() / "arg_groups" / "fields" / "model.py").is_file(),
                    reason="SGLang 0.5.23 source not here (set ATTNPLAN_SGLANG_SRC to an extracted wheel's sglang/srt)")
def test_the_choices_are_sglang_s_own():
    tree = ast.parse((_sglang_src() / "arg_groups" / "fields" / "model.py").read_text())
    field = next(n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "kv_cache_dtype")
    choices = next(k.value for n in ast.walk(field) if isinstance(n, ast.Call) for k in n.keywords if k.arg == "choices")
    assert tuple(ast.literal_eval(choices)) == SGLANG_CHOICES
    # every choice is modelled or named as unmodelled, and nothing else is taken
    assert set(KV_DTYPES) | set(KV_UNMODELLED) == set(SGLANG_CHOICES)


def _error(capsys, argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("kv", REFUSED)
def test_a_spelling_sglang_refuses_is_exit_2_with_sglang_s_message_on_every_command(capsys, tmp_path, kv):
    configs = tmp_path / "configs.yaml"
    configs.write_text(f"- {{name: llama, model_config: {LLAMA}, engine: sglang, kv_cache_dtype: {kv}}}\n")
    sg = ["--engine", "sglang", "--kv-cache-dtype", kv]
    messages = []
    for argv in (["plan", "--model-config", LLAMA, "--device", "H100", *sg],
                 ["plan", "--model-config", LLAMA, "--device", "H100", *sg, "--tensor-parallel-size", "3"],
                 ["explain", "--model-config", LLAMA, "--device", "B200", *sg, "--json"],
                 ["preflight", "--simulate", "H100=1", "--model-config", LLAMA, *sg],
                 ["preflight", "--simulate", "H100=1", "--configs", str(configs)],
                 ["sglang", "launch_server", "--model-path", LLAMA, "--kv-cache-dtype", kv, "--device", "H100"]):
        rc, err = _error(capsys, argv)
        assert rc == 2, (argv, err)
        assert len(err.splitlines()) == 1 and "kv_cache_dtype: " in err, err
        assert "SGLang 0.5.23" in err and "--kv-cache-dtype" in err and repr(kv) in err, err
        assert all(c in err for c in SGLANG_CHOICES), err   # names SGLang's choices
        messages.append(err.partition("kv_cache_dtype: ")[2])
    assert len(set(messages)) == 1   # one translation: one message, whichever surface read the flag


def test_vllm_s_engine_path_keeps_vllm_s_spelling(capsys):
    # the same words under vLLM: its fp8 plans, SGLang's fp8_e4m3 is vLLM's too, its bf16 it refuses
    assert main(["plan", "--model-config", LLAMA, "--device", "H100", "--kv-cache-dtype", "fp8"]) == 0
    assert main(["plan", "--model-config", LLAMA, "--device", "H100", "--kv-cache-dtype", "fp8_e4m3"]) == 0
    capsys.readouterr()
    rc, err = _error(capsys, ["plan", "--model-config", LLAMA, "--device", "H100", "--kv-cache-dtype", "bf16"])
    assert rc == 2 and "vLLM 0.33 refuses this --kv-cache-dtype at startup" in err


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def test_fp8_e4m3_is_planned_as_an_e4m3_cache_on_every_surface(capsys):
    rc, plan = _json(capsys, ["plan", "--model-config", "llama-3.1-8b", "--device", "B200", "--engine", "sglang",
                              "--kv-cache-dtype", "fp8_e4m3", "--json", "--no-trace"])
    assert rc == 0 and plan["verdict"]["outcome"] == "runs"
    assert plan["config"]["kv_cache_dtype"] == "fp8_e4m3" and plan["plan"]["kv_cache"]["kv_view_dtype"] == "float8_e4m3fn"
    rc_l, launch = _json(capsys, ["sglang", "launch_server", "--model-path", "llama-3.1-8b", "--kv-cache-dtype",
                                  "fp8_e4m3", "--device", "B200", "--json", "--no-trace"])
    assert rc_l == rc and launch["verdict"] == plan["verdict"] and launch["per_rank"] == plan
    client = TestClient(create_app(node=simulated_node("B200")))
    r = client.post("/v1/plan", params={"trace": "false"},
                    json={"model": "llama-3.1-8b", "engine": "sglang", "kv_cache_dtype": "fp8_e4m3"})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["verdict"] == plan["verdict"] and r.json()["per_rank"] == plan


@pytest.mark.parametrize("kv", ["fp8", "float16"])
def test_rest_bodies_and_lines_under_sglang_refuse_vllm_s_spelling(kv):
    client = TestClient(create_app(node=simulated_node("B200")))
    for path, body, field in (
            ("/v1/plan", {"model": "llama-3.1-8b", "engine": "sglang", "kv_cache_dtype": kv}, "kv_cache_dtype"),
            ("/v1/plan/launch", {"line": f"python -m sglang.launch_server --model-path llama-3.1-8b "
                                         f"--kv-cache-dtype {kv}"}, "line")):
        r = client.post(path, json=body)
        assert r.status_code == 422, (path, r.text[:300])
        d = r.json()["detail"][0]
        assert d["field"] == field and "SGLang 0.5.23" in d["msg"] and "--kv-cache-dtype" in d["msg"], d
    # the same body under vLLM is vLLM's spelling: planned
    r = client.post("/v1/plan", params={"trace": "false"}, json={"model": "llama-3.1-8b", "kv_cache_dtype": kv})
    assert r.status_code == 200, r.text[:300]


def test_compare_s_sglang_row_takes_sglang_s_spelling_only(capsys):
    from attnplan.compare import command_request

    # compare's --kv-cache-dtype is attnplan's name, said in each engine's own spelling (backends.yaml
    # engines.<name>.kv_dtype_spelling): fp8 is SGLang's fp8_e4m3; vLLM's float16 SGLang refuses in its words
    assert command_request("llama-3.1-8b", "sglang", kv_cache_dtype="fp8").kv_cache_dtype == "fp8_e4m3"
    rc, err = _error(capsys, ["compare", "llama-3.1-8b", "--device", "H100", "--kv-cache-dtype", "float16"])
    assert rc == 2 and "SGLang 0.5.23" in err and "'float16'" in err and all(c in err for c in SGLANG_CHOICES)


def test_a_request_read_twice_reads_the_same():
    # the request keeps SGLang's spelling: reading it again (engine_of) neither rewrites nor relaxes it
    from attnplan.request import ModelRequest, engine_of, read_reference

    req = ModelRequest.build(model="llama-3.1-8b", engine="sglang", kv_cache_dtype="fp8_e4m3")
    data = read_reference("llama-3.1-8b", allow_paths=True)
    _spec, once = engine_of(req, data)
    _spec, twice = engine_of(once, data)
    assert once.kv_cache_dtype == twice.kv_cache_dtype == "fp8_e4m3"
    assert once.line_fields()["kv_cache_dtype"] == twice.line_fields()["kv_cache_dtype"] == "fp8_e4m3"
    vllm_spelled = ModelRequest.build(model="llama-3.1-8b", engine="sglang", kv_cache_dtype="fp8")
    from attnplan.policy import InvalidInputError

    with pytest.raises(InvalidInputError, match="SGLang 0.5.23") as e:
        engine_of(vllm_spelled, data)[1].line_fields()
    assert e.value.field == "kv_cache_dtype" and "'fp8'" in str(e.value)

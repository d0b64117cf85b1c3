"""Issue 39 class 1: ``plan --model-config`` under ``--engine sglang`` hands the model's architecture to
SGLang's resolver (policy/engines.py engine_request_for_model -> attnplan.sglang.resolve.request_for_model),
as launch_server and compare do; layered models carry SGLang's pick per layer group."""

from __future__ import annotations

import json
from pathlib import Path

from attnplan.cli.main import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def plan(capsys, model, device, *extra):
    rc = cli_main(["plan", "--model-config", str(model), "--engine", "sglang", "--device", device, "--json", "--no-trace",
                   *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_deepseek_v3_fp8_on_b200_runs_trtllm_mla(capsys):
    # model_overrides/deepseek_v2.py _deepseek_family_overrides (was: flashinfer's fa2-mla, refused for fp8)
    rc, out = plan(capsys, ROOT / "examples" / "deepseek-v3.json", "B200", "--kv-cache-dtype", "fp8_e4m3")
    assert rc == 0 and out["engine_phases"]["prefill"]["name"] == "trtllm_mla", out["violations"]


def test_qwen3_next_on_b200_runs_triton_from_the_cli_as_from_launch_server(capsys):
    _, out = plan(capsys, ROOT / "tests" / "models" / "qwen3-next-80b-a3b-instruct.json", "B200")
    names = {g["engine_phases"]["prefill"]["name"] for g in out["layer_groups"] if g.get("engine_phases")}
    top = out.get("engine_phases")
    assert names == {"triton"} or (top and top["prefill"]["name"] == "triton")


def test_layered_models_carry_sglangs_pick_per_group(capsys):
    _, out = plan(capsys, ROOT / "examples" / "gemma-2-9b.json", "H100")
    groups = [g for g in out["layer_groups"] if g["kind"] in ("sliding", "full")]
    assert groups and all(g["engine_phases"]["prefill"]["name"] == "fa3" for g in groups)

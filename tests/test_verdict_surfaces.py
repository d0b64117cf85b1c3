"""One request, one answer: the same model on the same GPU gets the same verdict on every surface - the CLI's
table and --json, `vllm serve`, REST, preflight rows and labels (issue 36: the surfaces used to disagree)."""

from __future__ import annotations

import json

import httpx
import pytest

from attnplan.cli.main import main
from attnplan.policy import simulated_node
from attnplan import plan_model   # the public call: a finished answer (attnplan/embedded.py)
from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer
from attnplan.model.hfconfig import read_model_config
from attnplan.policy.verdict import OUTCOMES

# (device, preset, tensor parallel): outcomes that differ, engines' own backends and FlashInfer alike.
CASES = [
    ("H100", "deepseek-v3", 8),     # vLLM runs FLASH_ATTN_MLA: runs, not modelled
    ("B200", "deepseek-v3", 8),     # FLASHINFER_MLA: runs, modelled
    ("B200", "gemma-2-9b", 1),      # FLASHINFER drops the soft cap: wrong-output
    ("H100", "gemma-2-9b", 1),      # FLASH_ATTN applies it: runs
    ("A100", "gpt-oss-120b", 1),    # TRITON_ATTN: runs
    ("H100", "llama-3.1-8b", 3),    # tp 3 does not divide the heads: vLLM refuses at startup
]


def _out(capsys, argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().out


@pytest.fixture(scope="module")
def server():
    with BackgroundServer(create_app(node=simulated_node("H100"))) as srv:
        yield srv


@pytest.mark.parametrize("device,model,tp", CASES)
def test_every_surface_gives_the_same_verdict(capsys, server, device, model, tp):
    rc_serve, text = _out(capsys, ["vllm", "serve", model, "-tp", str(tp), "--device", device, "--json"])
    serve = json.loads(text)["verdict"]
    outcome = serve["outcome"]

    # the CLI's own table: the first line is the outcome; the exit code follows it
    rc_table, table = _out(capsys, ["vllm", "serve", model, "-tp", str(tp), "--device", device])
    assert rc_table == rc_serve == (0 if outcome == "runs" else 1)
    words = {o.upper() for o in OUTCOMES}
    assert next(ln.split()[0] for ln in table.splitlines() if ln.split() and ln.split()[0] in words) == outcome.upper()

    if tp == 3:  # vLLM's own startup error: no model plan, one verdict everywhere
        assert outcome == "fails-at-startup" and serve["rules"] == ["vllm.startup"]
    else:
        rc_plan, plan = _out(capsys, ["plan", "--model", model, "--tensor-parallel-size", str(tp), "--device", device, "--json"])
        assert json.loads(plan)["verdict"] == serve and rc_plan == rc_serve
        lib = plan_model(read_model_config(model), simulated_node(device), tensor_parallel_size=tp)
        assert lib.verdict.model_dump(mode="json") == serve

    # REST: the node plans the same line
    r = httpx.post(server.url + "/v1/plan/serve", json={"line": f"vllm serve {model} -tp {tp}", "node": {"device": device}},
                   timeout=60)
    if r.status_code == 200:
        assert r.json()["verdict"] == serve
    else:  # a serve route that refuses the line as bad input would be a different answer
        pytest.fail(f"/v1/plan/serve answered {r.status_code}: {r.text[:300]}")

    # preflight over simulated nodes: the row's outcome, pass exactly when it runs
    rc_pre, pre = _out(capsys, ["preflight", "--simulate", f"{device}=2", "--serve", f"vllm serve {model} -tp {tp}", "--json"])
    report = json.loads(pre)
    cell = report["nodes"][0]["results"][0]
    assert cell["outcome"] == outcome and (cell["verdict"] in ("pass", "warn")) == (outcome == "runs")

    # labels: runs, or the rule that decides the other outcome - never a rule where it runs
    rc_lab, lab = _out(capsys, ["labels", "--device", device, "--serve", f"vllm serve {model} -tp {tp}", "--json"])
    labels = json.loads(lab)
    value = next(v for k, v in labels.items() if k.startswith("attnplan.io/model-") and not k.endswith("-backend"))
    assert value == ("runs" if outcome == "runs" else serve["rules"][0])

"""One model, every entry point, one answer per layer group.

Gemma-3-27B (52 sliding + 10 global layers, softmax scale 168^-0.5), gpt-oss-20b (window 128 /
full, sinks) and DeepSeek-V3 (MLA) are planned by ``attnplan plan --model-config --json`` (the
reference) and through REST (``POST /v1/plan`` with the model, ``POST /v1/plan/serve`` with a
pasted line naming a repo id in the node's HuggingFace cache), preflight (real ``attnplan serve``
nodes on 127.0.0.1, and simulated ones) and ``attnplan labels --model``; every entry point must
give each layer group the reference's verdict, backends and rules. Bad input is one line (exit 2)
or a 422 naming the field, the same in every path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from attnplan.cli.main import main as cli_main
from attnplan.model import compact_layers

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "gemma-3": ROOT / "tests" / "models" / "gemma-3-27b-it.json",
    "gpt-oss": ROOT / "tests" / "models" / "gpt-oss-20b.json",
    "deepseek": ROOT / "attnplan" / "presets" / "deepseek-v3.json",
}
REPO_IDS = {"gemma-3": "google/gemma-3-27b-it", "gpt-oss": "openai/gpt-oss-20b", "deepseek": "deepseek-ai/DeepSeek-V3"}
# B200: trtllm-gen; H100: fa3/xqa; A100: fa2, and vLLM refuses sinks there (gpt-oss rejected).
DEVICES = ("B200", "H100", "A100")
SAFE_ENV = {"ATTNPLAN_ARTIFACTORY_CHECK": "never"}
ENTRY_POINTS = ("rest-model", "rest-serve", "preflight-http", "preflight-simulate", "labels")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def groups_of(per_rank: dict) -> list[tuple]:
    """Each layer group of a plan JSON (the CLI's or a node's): kind, layers, verdict, backends, rules."""
    n = per_rank["num_layers"]
    return [(g["kind"], compact_layers(g["layers"], n), g["status"],
             g["prefill"]["backend"] if g["prefill"] else None, g["decode"]["backend"] if g["decode"] else None,
             tuple(dict.fromkeys(v["rule"] for v in g["violations"]))) for g in per_rank["layer_groups"]]


def cell_groups(cell: dict) -> list[tuple]:
    """The same, from a preflight report cell."""
    return [(g["kind"], g["layers"], g["status"], g["prefill"], g["decode"], tuple(g["violations"]))
            for g in cell["layer_groups"]]


@pytest.fixture(scope="module")
def reference() -> dict:
    """``attnplan plan --device D --model-config M --json`` for every model and device."""
    out = {}
    for m, path in MODELS.items():
        for d in DEVICES:
            import contextlib
            import io

            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = cli_main(["plan", "--device", d, "--model-config", str(path), "--json", "--no-trace"])
            data = json.loads(buf.getvalue())
            assert rc == (0 if data["verdict"]["outcome"] == "runs" else 1)  # the command's verdict decides
            out[m, d] = data
    # The cases cover both verdicts and a layered model's groups.
    assert out["gpt-oss", "A100"]["status"] == "rejected" and out["gemma-3", "B200"]["status"] == "ok"
    assert len(out["gemma-3", "H100"]["layer_groups"]) == 2
    return out


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory) -> Path:
    """A HuggingFace hub cache holding the three config.json files under their repo ids."""
    root = tmp_path_factory.mktemp("hf") / "hub"
    for m, repo in REPO_IDS.items():
        d = root / ("models--" + repo.replace("/", "--"))
        snap = d / "snapshots" / ("0" * 40)
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(MODELS[m].read_text())
        (d / "refs").mkdir()
        (d / "refs" / "main").write_text("0" * 40)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def nodes(hf_cache):
    """One real ``attnplan serve --device D`` process per device, on 127.0.0.1."""
    env = {**os.environ, **SAFE_ENV, "HF_HUB_CACHE": str(hf_cache), "PYTHONPATH": str(ROOT)}
    env.pop("ATTNPLAN_TOKEN", None)
    procs, urls = [], {}
    try:
        for d in DEVICES:
            port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "attnplan", "serve", "--device", d, "--port", str(port), "--log-level", "warning"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            urls[d] = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        for d, url in urls.items():
            while True:
                try:
                    if httpx.get(url + "/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"{d} node did not start"
                time.sleep(0.1)
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


def _report(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc, out, err = run(capsys, "preflight", *argv, "--json")
    assert err == "" or "Traceback" not in err
    return rc, json.loads(out)


def _cells_by_device(report: dict) -> dict[str, dict]:
    return {r["device"]: r["results"][0] for r in report["nodes"]}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("model", list(MODELS))
def test_every_entry_point_gives_the_cli_answer_per_layer_group(entry, model, reference, nodes, capsys, monkeypatch,
                                                                hf_cache):
    want = {d: groups_of(reference[model, d]) for d in DEVICES}
    if entry == "rest-model":
        for d, url in nodes.items():
            body = {"model": json.loads(MODELS[model].read_text())}
            r = httpx.post(url + "/v1/plan", params={"trace": "false"}, json=body, timeout=30)
            assert r.status_code == 200, r.text
            data = r.json()
            assert groups_of(data["per_rank"]) == want[d]
            # the same JSON as the CLI's, group for group, KV-cache groups included
            ref = reference[model, d]
            assert data["per_rank"]["layer_groups"] == ref["layer_groups"]
            assert data["per_rank"]["kv_cache_groups"] == ref["kv_cache_groups"]
            assert data["status"] == ref["status"] and data["request"]["model"].startswith("config.json ")
    elif entry == "rest-serve":
        for d, url in nodes.items():
            r = httpx.post(url + "/v1/plan/serve", params={"trace": "false"}, content=f"vllm serve {REPO_IDS[model]}",
                           headers={"content-type": "text/plain"}, timeout=30)
            assert r.status_code == 200, r.text
            data = r.json()
            assert data["vllm"]["model"] == REPO_IDS[model] and data["ranks"] == 1
            assert groups_of(data["per_rank"]) == want[d]
            # and `attnplan vllm serve` itself, for the same cached repo id
            monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
            rc, out, _ = run(capsys, "vllm", "serve", REPO_IDS[model], "--device", d, "--json", "--no-trace")
            cli = json.loads(out)
            assert rc == (0 if data["verdict"]["outcome"] == "runs" else 1) and cli["status"] == data["status"]
            assert cli["verdict"] == data["verdict"] == reference[model, d]["verdict"]
            if "layer_groups" in cli["per_rank"]:  # layered: the CLI prints the groups too
                assert cli["per_rank"]["layer_groups"] == data["per_rank"]["layer_groups"]
    elif entry == "preflight-http":
        hosts = ",".join(u.removeprefix("http://") for u in nodes.values())
        rc, report = _report(capsys, "--hosts", hosts, "--model-config", str(MODELS[model]))
        cells = {}
        for row in report["nodes"]:
            d = next(k for k, u in nodes.items() if u.endswith(row["name"].rsplit(":", 1)[-1]))
            assert row["status"] in ("ok", "rejected"), row
            cells[d] = row["results"][0]
        assert {d: cell_groups(c) for d, c in cells.items()} == want
        _check_verdicts(rc, cells, {d: reference[model, d]["verdict"] for d in DEVICES})
    elif entry == "preflight-simulate":
        rc, report = _report(capsys, "--simulate", ",".join(f"{d}=2" for d in DEVICES), "--model-config",
                             str(MODELS[model]))
        cells = _cells_by_device(report)
        assert {d: cell_groups(c) for d, c in cells.items()} == want
        _check_verdicts(rc, cells, {d: reference[model, d]["verdict"] for d in DEVICES})
    else:  # labels
        for d in DEVICES:
            rc, out, _ = run(capsys, "labels", "--device", d, "--model", str(MODELS[model]), "--json")
            assert rc == 0
            labels = json.loads(out)
            v = reference[model, d]["verdict"]
            assert labels[f"attnplan.io/model-{MODELS[model].stem}"] == ("runs" if v["outcome"] == "runs" else v["rules"][0])
            assert labels[f"attnplan.io/model-{MODELS[model].stem}-backend"] == v["selected"]["decode"]


def _check_verdicts(rc: int, cells: dict, verdicts: dict) -> None:
    """A node passes exactly when the command runs there (the CLI's verdict); a failure names its outcome and rule."""
    for d, c in cells.items():
        v = verdicts[d]
        ok = v["outcome"] == "runs"
        assert c["verdict"] in (("pass", "warn") if ok else ("fail",)) and c["outcome"] == v["outcome"]
        if not ok:
            assert c["first_failing"] == v["rules"][0] and v["message"] in c["reason"]
    assert rc == (0 if all(c["verdict"] in ("pass", "warn") for c in cells.values()) else 1)


# -- serve lines: tensor parallelism per rank, vLLM's own startup refusal ----------------------
def test_serve_line_tp_per_rank_everywhere(nodes, capsys, hf_cache, monkeypatch):
    line = "vllm serve google/gemma-3-27b-it -tp 2 --kv-cache-dtype fp8"
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    rc, out, _ = run(capsys, "vllm", "serve", *line.split()[2:], "--device", "H100", "--json", "--no-trace")
    cli = json.loads(out)
    r = httpx.post(nodes["H100"] + "/v1/plan/serve", params={"trace": "false"}, json={"line": line}, timeout=30)
    data = r.json()
    assert r.status_code == 200 and data["per_rank"]["layer_groups"] == cli["per_rank"]["layer_groups"]
    assert {g["config"]["num_qo_heads"] for g in data["per_rank"]["layer_groups"]} == {16}  # 32 heads / tp 2
    assert {g["config"]["kv_cache_dtype"] for g in data["per_rank"]["layer_groups"]} == {"fp8"}
    # POST /v1/plan with the same request as JSON fields answers the same groups
    r2 = httpx.post(nodes["H100"] + "/v1/plan", params={"trace": "false"}, timeout=30, json={
        "model": "google/gemma-3-27b-it", "engine": "vllm", "tensor_parallel_size": 2, "kv_cache_dtype": "fp8"})
    assert r2.json()["per_rank"]["layer_groups"] == data["per_rank"]["layer_groups"]
    # preflight --serve: the same groups on a simulated H100 and on the real one
    rc, report = _report(capsys, "--simulate", "H100=1", "--serve", line)
    groups = cell_groups(report["nodes"][0]["results"][0])
    assert groups == groups_of(data["per_rank"])
    rc, report = _report(capsys, "--hosts", nodes["H100"].removeprefix("http://"), "--serve", line)
    assert cell_groups(report["nodes"][0]["results"][0]) == groups


def test_startup_refusal_is_a_rejection_everywhere(nodes, capsys, hf_cache, monkeypatch):
    """tp 3 does not divide Gemma-3's 32 heads: vLLM refuses at startup (its words), every path."""
    line = "vllm serve google/gemma-3-27b-it -tp 3"
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    rc, out, _ = run(capsys, "vllm", "serve", *line.split()[2:], "--device", "H100", "--json")
    cli = json.loads(out)
    assert rc == 1 and cli["status"] == "startup_error"
    r = httpx.post(nodes["H100"] + "/v1/plan/serve", content=line, headers={"content-type": "text/plain"}, timeout=30)
    assert r.status_code == 200 and r.json()["startup_error"] == cli["startup_error"]
    rc, report = _report(capsys, "--simulate", "H100=1", "--serve", line)
    cell = report["nodes"][0]["results"][0]
    assert rc == 1 and cell["verdict"] == "fail" and cli["startup_error"] in cell["reason"]
    rc, out, _ = run(capsys, "labels", "--device", "H100", "--serve", line, "--json")
    assert json.loads(out)["attnplan.io/model-gemma-3-27b-it"] == "vllm.startup"


def test_the_gemma3_preflight_plans_both_groups(capsys):
    """The issue's case: two groups (52 sliding, 10 global), not one uniform layer with a window."""
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=2,H100=2", "--model-config", str(MODELS["gemma-3"]))
    assert rc == 0
    assert "sliding x52" in out and "full x10" in out
    assert "sliding_window=1024" not in out  # the old single-config description


# -- bad input: one line, exit 2 / 422 naming the field, in every path --------------------------
BAD = [
    ({"kv_cache_dtype": "fp9"}, ["--kv-cache-dtype", "fp9"], "kv_cache_dtype"),
    ({"attention_backend": "NO_SUCH_BACKEND"}, ["--attention-backend", "NO_SUCH_BACKEND"], "attention_backend"),
    ({"engine": "vllm==0.1"}, ["--engine", "vllm==0.1"], "engine"),
]


@pytest.mark.parametrize("body, flags, field", BAD)
def test_bad_input_names_the_field_in_every_path(body, flags, field, nodes, capsys):
    model = json.loads(MODELS["gemma-3"].read_text())
    r = httpx.post(nodes["H100"] + "/v1/plan", json={"model": model, **body}, timeout=30)
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["detail"]] == [field]
    for argv in (["preflight", "--simulate", "H100=1", "--model-config", str(MODELS["gemma-3"]), *flags],
                 ["labels", "--device", "H100", "--model", str(MODELS["gemma-3"]), *flags]):
        if argv[0] == "labels" and field != "engine":
            continue  # labels take a model's flags on a serve line (below)
        rc, out, err = run(capsys, *argv)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert field in err, err
    line = f"vllm serve {MODELS['gemma-3']} " + " ".join(flags if field != "engine" else [])
    if field != "engine":
        rc, out, err = run(capsys, "labels", "--device", "H100", "--serve", line)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and field in err, err
        r = httpx.post(nodes["H100"] + "/v1/plan/serve", content=line.replace(str(MODELS["gemma-3"]), "google/gemma-3-27b-it"),
                       headers={"content-type": "text/plain"}, timeout=30)
        assert r.status_code == 422 and field in r.json()["detail"][0]["msg"], r.text


def test_hostile_config_json_in_a_body_meets_the_file_limits(nodes, tmp_path, capsys):
    deep: object = 1
    for _ in range(80):
        deep = [deep]
    model = {**json.loads(MODELS["gemma-3"].read_text()), "junk": deep}
    r = httpx.post(nodes["H100"] + "/v1/plan", json={"model": model}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "model" and "nested" in r.text
    f = tmp_path / "deep.json"
    f.write_text(json.dumps(model))
    rc, _, err = run(capsys, "preflight", "--simulate", "H100=1", "--model-config", str(f))
    assert rc == 2 and "nested" in err
    # layer_types that contradict num_hidden_layers: the same error as for the file
    bad = {**json.loads(MODELS["gpt-oss"].read_text()), "layer_types": ["full_attention"] * 3}
    r = httpx.post(nodes["H100"] + "/v1/plan", json={"model": bad}, timeout=30)
    f.write_text(json.dumps(bad))
    rc, _, err = run(capsys, "plan", "--device", "H100", "--model-config", str(f))
    assert r.status_code == 422 and rc == 2
    assert "layer_types has 3 entries" in r.json()["detail"][0]["msg"] and "layer_types has 3 entries" in err
    # a path on the node is never opened for a client
    r = httpx.post(nodes["H100"] + "/v1/plan", json={"model": str(MODELS["gemma-3"])}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "model"


def test_openapi_documents_both_bodies_and_answers_with_examples():
    from fastapi.testclient import TestClient

    from attnplan.policy import simulated_node
    from attnplan.rest.app import create_app

    with TestClient(create_app(node=simulated_node("H100"))) as c:
        s = c.get("/openapi.json").json()
    comps = s["components"]["schemas"]
    examples = comps["PlanRequest"]["examples"]
    assert any("config" in e for e in examples) and any(isinstance(e.get("model"), str) for e in examples)
    assert any(isinstance(e.get("model"), dict) for e in examples)  # a config.json inline
    answer = s["paths"]["/v1/plan"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert {r["$ref"].rsplit("/", 1)[-1] for r in answer["anyOf"]} == {"PlanAnswer", "ModelPlanOut"}
    serve = s["paths"]["/v1/plan/serve"]["post"]
    body = serve["requestBody"]["content"]
    assert body["text/plain"]["example"].startswith("vllm serve ")
    assert body["application/json"]["example"]["line"].startswith("vllm serve ")
    refs = [v for v in json.dumps(s).split('"$ref": "')[1:]]
    assert all(r.split('"')[0].rsplit("/", 1)[-1] in comps for r in refs)  # no dangling reference
    assert serve["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/ModelPlanOut")

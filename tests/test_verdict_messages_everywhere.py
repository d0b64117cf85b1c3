"""The verdict's sentence leaves on every surface (issue 36 item 6): the planner decides and leaves the data
(``Verdict.says``), render/verdict.py writes the sentence, and every answer that leaves attnplan - the CLI's
``--json``, REST, the Python API, the error of ``require_plan`` - carries it. A surface that handed out the
planner's answer unfinished would show an empty ``message``: each is driven here and every verdict in its
output is checked."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

import attnplan
from attnplan.cli.main import main
from attnplan.policy import simulated_node
from attnplan.rest.app import create_app

GEMMA2_B200 = ["--device", "B200"]
COMMANDS = [
    ["plan", "--device", "B200", "--head-dim", "256", "--num-heads", "16", "--num-kv-heads", "8",
     "--logits-soft-cap", "30", "--json"],
    ["plan", "--model", "gemma-2-9b", "--device", "B200", "--json"],
    ["plan", "--model", "deepseek-v3", "--tensor-parallel-size", "8", "--device", "H100", "--json"],
    ["explain", "--model", "gemma-2-9b", "--device", "H100", "--json"],
    ["explain", "--device", "A100", "--head-dim", "64", "--num-heads", "32", "--num-kv-heads", "8",
     "--kv-cache-dtype", "nvfp4", "--json"],
    ["vllm", "serve", "deepseek-v3", "-tp", "8", "--device", "H100", "--json"],
    ["vllm", "serve", "gemma-2-9b", "--device", "B200", "--json"],
    ["vllm", "serve", "gemma-2-9b", "-tp", "3", "--device", "B200", "--json"],
    ["sglang", "launch_server", "--model-path", "gpt-oss-120b", "--tp", "8", "--device", "B200", "--json"],
    ["compare", "gemma-2-9b", "--device", "H100", "--json"],
    ["plan", "--device", "H100", "--head-dim", "64", "--num-heads", "32", "--num-kv-heads", "8", "--kv-cache-dtype", "nvfp4",
     "--json"],
    ["plan", "--model-config", "tests/models/qwen3-next-80b-a3b-instruct.json", "--device", "H100", "--json"],
    ["upgrade", "--from", "vllm==0.31.0", "--to", "vllm==0.33.0", "gemma-2-9b", "--device", "B200", "--json"],
]


def verdicts(o, path="$"):
    """Every verdict object in a JSON answer (engine, outcome and message or its data)."""
    if isinstance(o, dict):
        if "outcome" in o and "engine" in o and ("says" in o or "message" in o):
            yield path, o
        for k, v in o.items():
            yield from verdicts(v, f"{path}.{k}")
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from verdicts(v, f"{path}[{i}]")


# A text field and the data it is written from (policy/answer.py Note, render/notes.py): a surface that handed out
# the planner's answer unfinished would show the data beside an empty text.
_TEXT_OF = ("message", "note", "change")


def unwritten(o, path="$"):
    """Every place in a JSON answer whose data (``says``, ``notes_says``) has no text beside it."""
    if isinstance(o, dict):
        says = o.get("says")
        if isinstance(says, dict) and "kind" in says and "outcome" not in says:   # a Note, not a verdict's data
            if not any(o.get(k) for k in _TEXT_OF):
                yield f"{path}.says ({says['kind']})"
        if o.get("notes_says") and (len(o.get("notes") or []) != len(o["notes_says"]) or not all(o["notes"])):
            yield f"{path}.notes"
        if o.get("engine_backend") and o.get("engine_note") == "":   # a compare row: the engine's note, worded
            yield f"{path}.engine_note"
        for k, v in o.items():
            yield from unwritten(v, f"{path}.{k}")
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from unwritten(v, f"{path}[{i}]")


def _check(data) -> int:
    found = list(verdicts(data))
    assert found, "no verdict in the answer"
    empty = [p for p, v in found if not v.get("message")]
    assert not empty, empty
    bare = list(unwritten(data))
    assert not bare, bare
    return len(found)


def test_unwritten_data_is_found():
    # the check itself: a note's data with no text beside it, and notes data with fewer texts, are found
    answer = {"suggestions": [{"message": "", "says": {"kind": "suggestion"}}, {"message": "x", "says": {"kind": "suggestion"}}],
              "notes": [], "notes_says": [{"kind": "no-attention"}],
              "verdict": {"outcome": "runs", "says": {"kind": "runs", "outcome": "runs"}, "message": "m"}}
    assert list(unwritten(answer)) == ["$.notes", "$.suggestions[0].says (suggestion)"]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_every_cli_json_verdict_carries_its_sentence(capsys, argv):
    rc = main(argv)
    assert rc in (0, 1)
    _check(json.loads(capsys.readouterr().out))


def test_a_simulated_preflight_carries_every_sentence(capsys):
    # preflight's cells hold each node's violations, suggestions and notes: written, as an HTTP node's JSON has them
    rc = main(["preflight", "--simulate", "H100=1,B200=1", "--head-dim", "64", "--num-heads", "32", "--num-kv-heads", "8",
               "--kv-cache-dtype", "nvfp4", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and "suggestions" in json.dumps(data)
    bare = list(unwritten(data))
    assert not bare, bare


def test_every_rest_verdict_carries_its_sentence():
    c = TestClient(create_app(node=simulated_node("B200")))
    bodies = [("/v1/plan", {"config": {"head_dim": 256, "num_qo_heads": 16, "num_kv_heads": 8, "logits_soft_cap": 30.0},
                            "node": {"device": "B200"}}),
              ("/v1/plan", {"model": "gemma-2-9b", "node": {"device": "B200"}}),
              ("/v1/plan/serve", {"line": "vllm serve deepseek-v3 -tp 8", "node": {"device": "H100"}}),
              ("/v1/plan/launch", {"line": "python -m sglang.launch_server --model-path gemma-2-9b", "node": {"device": "B200"}})]
    for route, body in bodies:
        r = c.post(route, json=body)
        assert r.status_code == 200, (route, r.text[:300])
        _check(r.json())


def test_the_python_api_and_its_error_carry_the_sentence():
    cfg = {"head_dim": 256, "num_qo_heads": 16, "num_kv_heads": 8, "logits_soft_cap": 30.0}
    a = attnplan.plan_for(cfg, simulated_node("B200"))
    assert a.verdict.outcome == "wrong-output" and a.verdict.message.startswith("vLLM 0.33.0 runs but computes wrong")
    m = attnplan.plan_model("gemma-2-9b", simulated_node("B200"))
    assert m.verdict.message and all(g.answer.verdict.message for g in m.layer_groups if g.answer)
    _check(m.to_json())
    with pytest.raises(attnplan.UnsupportedConfigurationError) as e:
        attnplan.require_plan(cfg, simulated_node("B200"))
    assert str(e.value).splitlines()[0] == f"wrong-output: {a.verdict.message}"
    # the planner's own error, raised below the renderer, still names the deciding rule and its message
    from attnplan import policy

    with pytest.raises(attnplan.UnsupportedConfigurationError) as low:
        policy.require_plan(cfg, simulated_node("B200"))
    assert str(low.value).splitlines()[0].startswith("wrong-output: [vllm.softcap-dropped] ")


def test_a_repeated_public_plan_is_finished_once():
    # the policy memoises the answer; the public call hands back the one finished copy of it, not a new one per call
    cfg = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
    a, b = attnplan.plan_for(cfg, simulated_node("H100")), attnplan.plan_for(cfg, simulated_node("H100"))
    assert a is b and a.verdict.message

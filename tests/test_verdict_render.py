"""The verdict's sentence is written by render/verdict.py from the data the planner leaves in ``Verdict.says``
(issue 36 item 6): for every kind of verdict, the rendered sentence is the contract's ``message``."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from attnplan import plan_for, plan_model      # the public calls: finished answers (attnplan/embedded.py)
from attnplan import policy
from attnplan.model import plan_model as model_layer_plan    # the model layer's own: unfinished
from attnplan.policy import simulated_node
from attnplan.policy.answer import SaysKind, VerdictSays, Violation
from attnplan.policy.verdict import combine, layout_refusal, with_group
from attnplan.render.notes import group_notes, model_notes
from attnplan.render.verdict import finish, says_message, verdict_message

LLAMA = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
GEMMA2 = {**LLAMA, "head_dim": 256, "num_qo_heads": 16, "logits_soft_cap": 50.0}

# One of each kind the planner says (found by sweeping head dims, KV dtypes, devices, engines and backends).
CASES = [
    (LLAMA, "B200", None),                                                  # runs
    (GEMMA2, "B200", None),                                                 # fails: wrong-output (dropped soft cap)
    ({**LLAMA, "attention_backend": "FLASH_ATTN"}, "H100", None),           # engine-backend-runs
    ({**LLAMA, "attention_backend": "FLASH_ATTN", "kv_cache_dtype": "fp8_e5m2"}, "H100", None),  # backend-refused
    ({**LLAMA, "head_dim": 64, "kv_cache_dtype": "nvfp4"}, "A100", None),   # no-valid-backend
    ({**LLAMA, "head_dim": 64, "kv_cache_dtype": "nvfp4"}, "A100", "sglang"),  # fails, quoting SGLang's own refusal
    ({**LLAMA, "head_dim": 512, "sinks": True}, "A100", "sglang"),         # runs-unjudged
    (LLAMA, "H100", "sglang"),                                              # runs, on the engine's own kernels
    ({**LLAMA, "head_dim": 512}, "A100", "flashinfer"),                     # attnplan's own adapter
]


def _verdicts():
    return [plan_for(f, simulated_node(d), engine=e).verdict for f, d, e in CASES]


def test_every_kind_renders_the_contracts_message():
    vs = _verdicts()
    assert {v.says.kind for v in vs} >= set(typing.get_args(SaysKind)) - {"model-fails", "layout-refused"}
    for v in vs:
        assert v.says.outcome == v.outcome
        assert verdict_message(v) == v.message
        # the data alone writes it: a verdict with its message emptied is finished back to the same text
        assert finish(v.model_copy(update={"message": ""})).message == v.message


def test_an_engines_own_refusal_is_quoted_not_prefixed_twice():
    v = plan_for({**LLAMA, "head_dim": 64, "kv_cache_dtype": "nvfp4"}, simulated_node("A100"), engine="sglang").verdict
    assert v.says.kind == "fails" and v.message.startswith(f"[{v.says.rule}] SGLang ")


def test_the_data_travels_in_the_json():
    a = plan_for(GEMMA2, simulated_node("B200"))
    data = a.to_json()
    assert data["verdict"]["says"]["kind"] == "fails" and data["verdict"]["message"] == verdict_message(a.verdict)
    # an answer read back from JSON (a preflight HTTP node) is the local one, data included
    back = type(a.verdict).model_validate(data["verdict"])
    assert back == a.verdict and verdict_message(back) == a.verdict.message
    # one without data (an older node's JSON): its message is all there is, and it is kept
    old = type(a.verdict).model_validate({k: v for k, v in data["verdict"].items() if k != "says"})
    assert old.says is None and verdict_message(old) == a.verdict.message and finish(old) is old


def test_layout_refusal_group_and_model_verdicts_render_from_data():
    v = layout_refusal("sglang", "0.5.23", "num_attention_heads (32) must be divisible by tp_size (3)", "src")
    assert v.says.kind == "layout-refused" and v.message == ""          # the planner leaves the data only
    assert verdict_message(v) == "SGLang 0.5.23 refuses at startup: num_attention_heads (32) must be divisible by tp_size (3)"
    assert finish(v).message == verdict_message(v)
    bad = with_group(_verdicts()[1], "sliding layers 0-40:2")
    assert verdict_message(bad).startswith("sliding layers 0-40:2: vLLM 0.33.0 runs but computes wrong output")
    extra = [(Violation(rule="model.block-size", phase="both", message="no page size suits every layer group"),
              "fails-at-startup")]
    m = combine([_verdicts()[0], bad], extra)
    assert m.says.kind == "model-fails" and m.outcome == "fails-at-startup"
    assert verdict_message(m) == ("vllm==0.33.0: the model fails at startup: [model.block-size] no page size suits "
                                  "every layer group")


@pytest.mark.parametrize("f,device,engine", CASES)
def test_the_planner_writes_no_sentence(f, device, engine):
    # attnplan/policy decides and leaves the data (Verdict.says); the sentence is render/verdict.py's alone, written
    # where an answer leaves for a caller (attnplan.plan_for, the CLI, REST, preflight, the plugin)
    planned = policy.plan_for(f, simulated_node(device), engine=engine).verdict
    assert planned.message == "" and planned.says is not None
    assert plan_for(f, simulated_node(device), engine=engine).verdict.message == says_message(planned.says) != ""


@pytest.mark.parametrize("device", ["H100", "B200", "A100"])
def test_the_model_layer_writes_no_sentence_and_the_public_call_does(device):
    m = model_layer_plan("gemma-2-9b", simulated_node(device))
    assert m.verdict.message == "" and all(g.answer.verdict.message == "" for g in m.layer_groups if g.answer)
    done = plan_model("gemma-2-9b", simulated_node(device))
    assert done.verdict.message and all(g.answer.verdict.message for g in done.layer_groups if g.answer)


# -- notes ------------------------------------------------------------------------------------------
MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b-instruct", "falcon-h1-7b-instruct", "gemma-3-27b-it"])
def test_model_notes_are_written_from_the_answers_data(name):
    data = json.loads((MODELS / f"{name}.json").read_text())
    planned = model_layer_plan(data, simulated_node("H100"))
    # the planner keeps no copy of the text (it was TRANSITIONAL here): its notes are data until finished
    assert planned.notes == () and all(g.notes == () for g in planned.layer_groups)
    m = plan_model(data, simulated_node("H100"))
    written = model_notes(planned)
    assert list(m.notes) == written and len(set(written)) == len(written)
    for g, h in zip(planned.layer_groups, m.layer_groups):
        assert list(h.notes) == group_notes(g)
    hybrid = m.kv_cache_groups.raised_attention_page_bytes is not None
    assert hybrid == any(n.startswith("hybrid KV cache") for n in written)
    assert hybrid == (name != "gemma-3-27b-it")
    assert m.to_json()["kv_cache_groups"]["raised_attention_page_bytes"] == m.kv_cache_groups.raised_attention_page_bytes
    assert m.to_json()["kv_cache_groups"]["notes"] == [n for n in written if n.startswith("hybrid KV cache")]

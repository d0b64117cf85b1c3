"""Issue 40 class 2: a config.json whose ``architectures`` is not a list of class names is refused once,
by type, naming the field, on every SGLang path (launch_server, compare) - never a KeyError/TypeError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan.errors import AttnplanError, InvalidInputError
from attnplan.policy import simulated_node
from attnplan.compare import compare
from attnplan.sglang.flags import architecture_of
from attnplan.lines import plan_launch
from attnplan.sglang.launch import parse_launch_line

ROOT = Path(__file__).resolve().parents[1]
LLAMA = json.loads((ROOT / "attnplan" / "presets" / "llama-3.1-8b.json").read_text())
GPT_OSS = json.loads((ROOT / "attnplan" / "presets" / "gpt-oss-120b.json").read_text())

ODD = [{"a": 1}, 3, 2.5, True, False, [["LlamaForCausalLM"]], [{"a": 1}], "LlamaForCausalLM", [3], ["x", 4], [""], [None]]


@pytest.mark.parametrize("value", ODD, ids=repr)
def test_odd_architectures_are_refused_by_name(value):
    with pytest.raises(InvalidInputError, match="architectures") as exc:
        architecture_of({"architectures": value})
    assert "LlamaForCausalLM" not in str(exc.value)  # the input is not echoed


@pytest.mark.parametrize("value", ODD, ids=repr)
def test_compare_refuses_odd_architectures_as_input(value):
    with pytest.raises(InvalidInputError, match="architectures"):
        compare({**LLAMA, "architectures": value}, ["B200"])


@pytest.mark.parametrize("value", [{"a": 1}, 2.5, [["LlamaForCausalLM"]], [{"a": 1}], "GptOssForCausalLM"], ids=repr)
def test_launch_refuses_odd_architectures_as_input(tmp_path, value):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA, "architectures": value}))
    with pytest.raises(InvalidInputError, match="architectures"):
        plan_launch(parse_launch_line(["--model-path", str(p)]), simulated_node("B200"))


@pytest.mark.parametrize("value", [None, []])
def test_no_architecture_is_no_override(value):
    assert architecture_of({"architectures": value}) is None and architecture_of({}) is None
    rep = compare({**LLAMA, "architectures": value}, ["B200"])
    assert rep["architecture"] is None and all(r["status"] for r in rep["rows"])


def test_a_bare_string_is_not_read_as_its_first_letter():
    # (raw.get("architectures") or [None])[0] read "GptOssForCausalLM" as "G": no override, no assert.
    with pytest.raises(AttnplanError):
        compare({**GPT_OSS, "architectures": "GptOssForCausalLM"}, ["B200"])
    assert architecture_of({"architectures": ["GptOssForCausalLM", "X"]}) == "GptOssForCausalLM"

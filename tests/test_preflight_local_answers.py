"""A simulated node's model answer is built from the planned objects (no JSON round trip) and is the very
answer a remote node's JSON parses into: the same cells, verdicts, groups, violations and notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnplan.policy import default_ruleset, simulated_node
from attnplan.preflight.model import NamedConfig
from attnplan.preflight.model_answers import model_answer, model_cell, served_model_answer
from attnplan.request import ModelRequest, answer_json, plan_request

MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize("model,tp", [("gemma-3-27b-it", 1), ("gpt-oss-20b", 2), ("deepseek-v3", 8), ("gemma-2-9b", 1),
                                      ("gemma-2-9b", 3)])
@pytest.mark.parametrize("device", ["H100", "B200", "A100"])
def test_local_answer_is_the_remote_one(model, tp, device):
    rs = default_ruleset()
    req = ModelRequest.build(model=str(MODELS / f"{model}.json"), tensor_parallel_size=tp)
    nc = NamedConfig(model, None, request=req)
    node = simulated_node(device)
    sa = plan_request(req, node, rs)
    local = served_model_answer(sa, node, rs.revision)
    remote = model_answer(answer_json(sa, req, node, trace=False, rules_revision=rs.revision), nc)
    assert model_cell(0, local) == model_cell(0, remote)
    assert local.verdict == remote.verdict and local.status == remote.status
    assert local.violations == remote.violations and local.notes == remote.notes
    assert local.startup_error == remote.startup_error
    assert [(g.status, g.answer.plan if g.answer else None) for g in local.groups] == \
        [(g.status, g.answer.plan if g.answer else None) for g in remote.groups]

"""Schemathesis over the live server's OpenAPI schema: no 5xx, every response as documented.

Positive and negative cases for every operation, sent over real HTTP to a uvicorn server on a
free 127.0.0.1 port, bounded so the whole file stays well under a minute.
"""

from __future__ import annotations

import time

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer
from attnplan.policy import BACKEND_CHOICES, KV_CACHE_DTYPES, QUERY_DTYPES, catalog
from attnplan.node import ProbeIO

TOKEN = "schema-token"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@pytest.fixture(scope="module")
def live():
    app = create_app(token=TOKEN, probe_io=ProbeIO(env={"ATTNPLAN_ARTIFACTORY_CHECK": "never"}))
    with BackgroundServer(app) as srv:
        deadline = time.monotonic() + 10
        while httpx.get(srv.url + "/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield srv


def operations(url: str):
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    ops = [result.ok() for result in schema.get_all_operations()]
    assert len(ops) >= 9
    return ops


def fuzz(op, mode: GenerationMode, examples: int, headers: dict[str, str] | None) -> None:
    @given(case=op.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    def run(case):
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        # Negative cases need something to break: an operation without parameters has none.
        assert mode is GenerationMode.NEGATIVE and not op.query and not op.body, op.label


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_conforms(live, mode):
    for op in operations(live.url):
        fuzz(op, mode, 40, {"Authorization": f"Bearer {TOKEN}"})


# Schema-valid bodies are mostly invalid plans (head_dim and the MLA dims depend on each other;
# random device names are unknown), so the answers' own schema gets checked on these: configs
# that validate, on catalog devices and capabilities, ok and rejected alike.
STANDARD = st.fixed_dictionaries(
    {"head_dim": st.sampled_from([64, 96, 128, 192, 256, 512]), "num_kv_heads": st.sampled_from([1, 2, 4, 8]),
     "num_qo_heads": st.sampled_from([8, 16, 32, 64])},
    optional={"dtype": st.sampled_from(QUERY_DTYPES), "kv_cache_dtype": st.sampled_from(KV_CACHE_DTYPES),
              "page_size": st.sampled_from([16, 32, 64, 128, 7]), "sliding_window": st.integers(1, 1 << 20),
              "logits_soft_cap": st.floats(0.5, 100), "sinks": st.booleans(), "cascade": st.booleans(),
              "num_speculative_tokens": st.integers(0, 8), "dcp_world_size": st.integers(1, 8),
              "attention_backend": st.sampled_from(BACKEND_CHOICES), "batch_invariant": st.booleans()})
MLA = st.fixed_dictionaries(
    {"num_qo_heads": st.sampled_from([16, 128]), "kv_lora_rank": st.sampled_from([256, 512]),
     "qk_nope_head_dim": st.sampled_from([128, 192]), "qk_rope_head_dim": st.sampled_from([32, 64]),
     "v_head_dim": st.sampled_from([128, 256])},
    optional={"kv_cache_dtype": st.sampled_from(["auto", "bf16", "fp8_e4m3"]), "page_size": st.sampled_from([32, 64])})
NODE = st.one_of(
    st.none(),
    st.fixed_dictionaries({"device": st.sampled_from(catalog().names())},
                          optional={"flashinfer_version": st.sampled_from(["0.6.7", "0.6.7.post2", "0.7.2.post1"]),
                                    "cubins": st.sampled_from(["available", "missing"])}),
    st.fixed_dictionaries({"capability": st.sampled_from(["8.0", "8.9", "9.0", "10.0", "10.3", "12.0"])}),
)


def valid_config(cfg: dict) -> bool:
    return cfg.get("kv_lora_rank") is not None or cfg["num_kv_heads"] <= cfg["num_qo_heads"]


def test_plan_answers_conform(live):
    plan = next(op for op in operations(live.url) if op.label == "POST /v1/plan")
    statuses: set[str] = set()

    @given(config=st.one_of(STANDARD, MLA).filter(valid_config), node=NODE, trace=st.booleans())
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
    def run(config, node, trace):
        body = {"config": config} if node is None else {"config": config, "node": node}
        case = plan.Case(body=body, query={"trace": trace}, media_type="application/json")
        response = case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)
        assert response.status_code == 200, response.text
        statuses.add(response.json()["status"])

    run()
    assert statuses == {"ok", "rejected"}


def test_without_token_every_answer_is_documented(live):
    # No Authorization header: protected operations answer 401, which the schema documents.
    for op in operations(live.url):
        fuzz(op, GenerationMode.POSITIVE, 5, None)

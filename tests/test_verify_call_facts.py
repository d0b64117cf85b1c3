"""Verify's per-call data (attnplan/verify/call_facts.py, issue 25.4): one row per call the catalog
declares, and the behaviour that used to test a call's name - JIT grouping, tolerance keys, the
query quantization the reference mirrors - read from those rows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnplan.errors import RulePackError

from attnplan.policy import AttentionConfig, default_ruleset
from attnplan.verify import call_facts, tolerance
from attnplan.verify.generate import jit_identity


def _declared() -> set[str]:
    return {c.call for b in default_ruleset().backends.values()
            for table in (b.calls, b.sink_calls, b.mla_calls) for c in table.values()}


def test_every_call_the_catalog_declares_has_one_row():
    assert set(call_facts.table()) == _declared()
    with pytest.raises(RulePackError, match="no facts for the kernel call 'cudnn_prefill'.*verify: row"):
        call_facts.facts("cudnn_prefill")


def _pp(call, **kw):
    base = dict(call=call, query_dtype="bfloat16", kv_view_dtype="bfloat16", output_dtype="bfloat16",
                flashinfer_backend="fa2", use_tensor_cores=None, q_len_per_req=1)
    return SimpleNamespace(**{**base, **kw})


CFG = AttentionConfig(head_dim=128, num_qo_heads=8, num_kv_heads=2, dtype="bf16", page_size=16)


def test_tensor_core_decode_shares_the_prefill_module_and_plain_decode_has_its_own():
    assert jit_identity(CFG, _pp("paged_decode", use_tensor_cores=True)) == \
        jit_identity(CFG, _pp("paged_prefill"))
    assert jit_identity(CFG, _pp("paged_decode", use_tensor_cores=False)).startswith("decode:")
    # The sink wrapper's decode is the sink module whatever use_tensor_cores says.
    assert jit_identity(CFG, _pp("sink", use_tensor_cores=True)).startswith("sink:fa2:")
    xqa = jit_identity(CFG, _pp("xqa_decode", flashinfer_backend="xqa", q_len_per_req=3))
    assert xqa.startswith("xqa:") and xqa.endswith(":q=3") and ":g=4:" in xqa


def _spec(call, **kw):
    return {"call": call, "backend": "fa2", "query_dtype": "bfloat16", "kv_view_dtype": "bfloat16", **kw}


def test_tolerance_keys_and_query_quantization_follow_the_rows():
    assert tolerance.kernel_key(_spec("paged_decode", use_tensor_cores=True)) == "fa2:paged_decode:tc:q=bfloat16:kv=bfloat16"
    assert tolerance.kernel_key(_spec("sink", use_tensor_cores=True)) == "fa2:sink:q=bfloat16:kv=bfloat16"
    assert tolerance.query_quantized_to(_spec("xqa_decode", kv_view_dtype="float8_e4m3fn")) == "float8_e4m3fn"
    assert tolerance.query_quantized_to(_spec("xqa_decode")) is None
    assert tolerance.query_quantized_to(_spec("paged_decode", kv_view_dtype="float8_e4m3fn")) is None

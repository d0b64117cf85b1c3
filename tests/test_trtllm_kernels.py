"""The trtllm-gen kernel layer: FlashInfer's kernel table (pin 158f6fa1, flashinfer-cubin 0.6.13) and the
port of its host-side selection (attnplan/kernels/trtllm_gen), and the rule trtllm.kernel-missing built on it.

Expected kernels are the table's own rows (function names as FlashInfer's cubin names spell them); the
port's agreement with FlashInfer's compiled code is tests/test_trtllm_oracle.py.
"""

from __future__ import annotations

import gzip
import json

import pytest

from attnplan import policy
from attnplan.kernels.trtllm_gen import phase as tg
from attnplan.kernels.trtllm_gen import select as sel
from attnplan.kernels.trtllm_gen.table import (PIN_0_6, TableError, load_bytes, parse_checksums, parse_meta_info,
                                               shipped)
from attnplan.policy import AttentionConfig, simulated_node

T = shipped()


def launch(code="0.6", **kw):
    base = dict(mode=1, sm=100, dtype_q="BF16", dtype_kv="BF16", dtype_o="BF16", head_dim_qk=128, head_dim_v=128,
                page_size=16, num_heads_q=32, num_heads_kv=8, batch=8, max_q_len=1, max_kv_len=8192, sm_count=148)
    base.update(kw)
    return sel.launch(T, code, **base)


# -- the table ----------------------------------------------------------------------------------
def test_shipped_table_is_pin_158f6fa1_with_its_checksums_and_license():
    assert T.pin == PIN_0_6 and len(T.rows) == 13452
    # checksums.txt lists the header itself: the shipped copy records both
    assert T.header_sha256 == "f6781dfd70669167b7356fa77a805e7306443348a4b5d6a93732a27ebbb3b418"
    assert T.checksums_sha256 and "Apache License" in T.license
    sms = {r["mSM"] for r in T.rows}
    assert sms == {100, 103, 10100}   # kSM_100, kSM_103, kSM_100f: no 10.7-specific kernel


def test_table_parser_reads_the_header_format_and_refuses_a_truncated_one():
    header = (
        "/* Apache License */\nstruct TllmGenFmhaKernelMetaInfo\n{\n"
        + "".join(f"    int {c};\n" for c in ("mA",)) + "};\n")
    with pytest.raises(TableError, match="lacks"):
        parse_meta_info(header, "x.h")
    r = T.rows[0]
    fields = ["mDataTypeQ", "mDataTypeKv", "mDataTypeK", "mDataTypeV", "mDataTypeO", "mTileSizeQ", "mTileSizeKv",
              "mStepQ", "mStepKv", "mHeadDimPerCtaV", "mHeadDimQk", "mHeadDimV", "mSM", "mCubin", "mCubinSize",
              "mFuncName", "mSharedMemBytes", "mThreadsPerCTA", "mQkvLayout", "mNumTokensPerPage", "mMaskType",
              "mKernelType", "mTileScheduler", "mMultiCtasKvMode", "mNumEltsPerSageAttnBlkQ",
              "mNumEltsPerSageAttnBlkK", "mNumEltsPerSageAttnBlkP", "mNumEltsPerSageAttnBlkV", "mGroupsHeadsQ",
              "mGroupsTokensHeadsQ", "mReuseSmemKForV", "m2CtaMma", "mSparseAttn", "mSkipsSoftmaxWhenPossible",
              "mReserved1", "mReserved2", "sha256"]
    decl = "".join(f"    {'const char*' if f in ('mFuncName', 'sha256') else 'const unsigned char*' if f == 'mCubin' else 'int'} {f};\n"
                   for f in fields)

    def val(f):
        v = r.get(f, 0)
        if f.startswith("mDataType"):
            return f"DATA_TYPE_{v}"
        if f == "mSM":
            return "kSM_100"
        if f in ("mFuncName", "sha256"):
            return f'"{v}"'
        if f == "mCubin":
            return "nullptr"
        return "true" if v is True else "false" if v is False else str(v)

    row = "{ " + ", ".join(val(f) for f in fields) + "}"
    text = ("/* Apache License */\nstruct TllmGenFmhaKernelMetaInfo\n{\n" + decl + "};\n"
            "static const TllmGenFmhaKernelMetaInfo sTllmGenFmhaKernelMetaInfos[] = {\n" + row + ",\n")
    with pytest.raises(TableError, match="not closed"):
        parse_meta_info(text, "truncated.h")
    t = parse_meta_info(text + "};\n", "one.h")
    assert len(t.rows) == 1 and t.rows[0]["mFuncName"] == r["mFuncName"] and t.rows[0]["sha256"] == r["sha256"]


def test_corrupt_table_bytes_and_checksums_are_errors_naming_the_file():
    with pytest.raises(TableError, match="node/158f6fa1.json.gz"):
        load_bytes(b"not gzip", "node/158f6fa1.json.gz")
    doc = {"format": "attnplan-trtllm-gen-table/1", "pin": "x", "count": 2, "columns": {"mFuncName": ["a"]}}
    with pytest.raises(TableError, match="unequal"):
        load_bytes(gzip.compress(json.dumps(doc).encode()), "short.json.gz")
    with pytest.raises(TableError, match="checksums.txt"):
        parse_checksums("nothex  file.cubin\n", "checksums.txt")


# -- selection --------------------------------------------------------------------------------------
def test_bf16_gqa_decode_picks_the_swaps_ab_generation_kernel_of_its_page():
    s = launch(batch=8, max_kv_len=100)   # few KV tiles: one CTA per sequence, persistent scheduler
    assert s.ok and s.function == "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP16VarSeqQ8Kv128PersistentSwapsAbForGen"
    assert s.cubin == s.function + ".cubin"
    assert s.sha256 == next(r["sha256"] for r in T.rows if r["mFuncName"] == s.function)
    # a longer KV splits it over up to 16 CTAs reduced in a CGA cluster; beyond 16 splits, in global memory
    assert "MultiCtasKvCga" in launch(batch=8, max_kv_len=8192).function
    many = launch(batch=1, max_kv_len=32768).function
    assert "MultiCtasKv" in many and "Cga" not in many


def test_nvfp4_kv_kernels_write_fp8_only():
    assert launch(dtype_q="E4M3", dtype_kv="E2M1", dtype_o="E4M3").ok
    miss = launch(dtype_q="E4M3", dtype_kv="E2M1", dtype_o="BF16")
    assert miss.kind == "MISS" and "numTokensPerPage=16" in miss.detail
    assert not any(r["mDataTypeK"] == "E2M1" and r["mDataTypeO"] != "E4M3" for r in T.rows)


def test_bf16_query_over_fp8_cache_is_generation_only():
    assert launch(dtype_q="BF16", dtype_kv="E4M3", dtype_o="BF16").ok
    ctx = launch(mode=0, dtype_q="BF16", dtype_kv="E4M3", dtype_o="BF16", max_q_len=512)
    assert ctx.kind == "MISS" and "kernelType=0" in ctx.detail
    assert launch(mode=0, dtype_q="E4M3", dtype_kv="E4M3", dtype_o="BF16", max_q_len=512).ok


def test_sm107_is_refused_by_0_6_runner_and_served_by_family_kernels_on_0_7():
    s = launch(sm=107)
    assert s.kind == "ERR" and "Unsupported architecture" in s.detail
    s7 = launch(code="0.7", sm=107)
    assert s7.ok and s7.function.startswith("fmhaSm100f")


def test_e5m2_is_refused_by_the_runner_dtype_check():
    s = launch(dtype_q="E5M2", dtype_kv="E5M2")
    assert s.kind == "ERR" and "Unsupported Q data type: E5M2" in s.detail


def test_mla_decode_has_page_16_and_no_bf16_query_over_fp8_latent():
    for page in (16, 32, 64):
        s = launch(dtype_q="BF16", dtype_kv="BF16", head_dim_qk=576, head_dim_v=512, num_heads_q=128,
                   num_heads_kv=1, page_size=page)
        assert s.ok and f"HQk576HV512" in s.function and f"P{page}" in s.function
    s = launch(dtype_q="BF16", dtype_kv="E4M3", head_dim_qk=576, head_dim_v=512, num_heads_q=128, num_heads_kv=1)
    assert not s.ok


def test_cga_occupancy_fallback_reselects_gmem_reduction():
    cga = launch(batch=8, max_kv_len=8192)
    fallback = launch(batch=8, max_kv_len=8192, max_active_clusters=0)
    assert "Cga" in cga.function and fallback.ok and "Cga" not in fallback.function
    assert "MultiCtasKv" in fallback.function


# -- a phase at every serving shape ---------------------------------------------------------------------------
def call(**kw):
    base = dict(query_dtype="bf16", kv_dtype="bf16", out_dtype="bf16", head_dim_qk=128, head_dim_vo=128,
                num_qo_heads=32, num_kv_heads=8)
    base.update(kw)
    return tg.phase_call(tg.DECODE, **base)


def test_decision_lists_every_cubin_the_serving_shapes_load_and_who_decided():
    d = tg.decide(call(), 100, 16, "0.6.13")
    assert d.ok and d.function in d.functions and len(d.functions) > 1
    assert all(c.endswith(".cubin") for c in d.cubins)
    assert d.table.startswith("158f6fa1") and d.code == "flashinfer 0.6.13"
    d7 = tg.decide(call(), 100, 16, "0.7.2.post1")
    assert d7.code == "flashinfer 0.7.2.post1" and d7.table.startswith("158f6fa1")
    assert tg.decide(call(), 100, 16, "0.6.7.post2") is None   # no known table: not decided here


def test_shape_dependent_miss_names_the_failing_shapes():
    # MLA (256, 64) with 128 heads: at small batch and long KV the selection picks a 2-CTA keeps-AB kernel
    # the 320/256 family lacks
    c = tg.phase_call(tg.MLA_DECODE, query_dtype="bf16", kv_dtype="bf16", out_dtype="bf16",
                      head_dim_qk=192, head_dim_vo=128, num_qo_heads=128, num_kv_heads=128, kv_lora_rank=256,
                      qk_rope_head_dim=64)
    d = tg.decide(c, 100, 32, "0.6.13")
    assert not d.ok and d.functions and "serving shapes (e.g. batch" in d.missing
    assert "uses2CtaMma=1" in d.missing


def test_wrapper_asserts_come_before_the_launcher():
    d = tg.decide(call(query_dtype="bf16", out_dtype="fp8_e4m3"), 100, 16, "0.6.13")
    assert not d.ok and "Unsupported out_dtype" in d.missing
    ragged = tg.phase_call(tg.RAGGED, query_dtype="bf16", kv_dtype="bf16", out_dtype="bf16",
                           head_dim_qk=96, head_dim_vo=96, num_qo_heads=16, num_kv_heads=16)
    assert "head dims" in tg.decide(ragged, 100, 16, "0.6.13").missing


# -- the rule ---------------------------------------------------------------------------------------------
def test_nvfp4_plans_the_fp8_output_every_nvfp4_kernel_writes():
    # every NVFP4 kernel of the table writes fp8 (backends.yaml families.trtllm-gen.output_dtype_over_kv): the plan
    # says so, and names the cubins it loads with their sha256
    a = policy.plan_for(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4",
                                        attention_backend="trtllm-gen"), simulated_node("B200"), engine="flashinfer")
    assert a.ok and {a.plan.prefill.output_dtype, a.plan.decode.output_dtype} == {"float8_e4m3fn"}
    assert a.plan.decode.cubins and all("KvE2m1OE4m3" in c.file and len(c.sha256) == 64 for c in a.plan.decode.cubins)
    assert "158f6fa1" in a.plan.decode.kernel_table


def test_rule_refuses_nvfp4_with_16bit_output_naming_kernel_and_table():
    from attnplan.policy.candidates import trtllm_decision
    from attnplan.policy.facts_catalog import PAGE_SIZE, base_context

    cfg = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4")
    ctx = base_context(cfg, simulated_node("B200"))
    ctx.update({"phase.query_dtype": "fp8_e4m3", "phase.output_dtype": "bf16", PAGE_SIZE: 16})
    d = trtllm_decision(ctx, "decode", "trtllm-gen")
    assert not d.ok and "Q E4M3 / KV E2M1 / O BF16" in d.missing and "158f6fa1" in d.provenance()


def test_rule_passes_bf16_and_candidate_names_the_kernel():
    from attnplan.policy.candidates import evaluate_candidate
    cfg = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8, attention_backend="trtllm-gen")
    node = simulated_node("B200")
    a = policy.plan_for(cfg, node, engine="flashinfer")
    assert a.ok and not [x for x in a.violations if x.rule == "trtllm.kernel-missing"]
    res = evaluate_candidate(cfg, node, "decode", "trtllm-gen", engine="flashinfer")
    page = res.pages[0]
    assert res.kernels[page].function.startswith("fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKv")
    assert f"P{page}" in res.kernels[page].function or "P128" not in res.kernels[page].function


def test_plan_phases_name_their_cubins_through_for_config():
    cfg = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8)
    a = policy.plan_for(cfg, simulated_node("B300"))
    assert a.ok and a.backends() == ("trtllm-gen", "trtllm-gen")
    rows = {r["mFuncName"]: r for r in T.rows}
    for ph, kernel_type in ((a.plan.prefill, 0), (a.plan.decode, 2)):
        d = tg.for_config(ph.entry_point, a.config, query_dtype=ph.query_dtype, output_dtype=ph.output_dtype,
                          capability=103, page_size=a.plan.kv_cache.page_size, flashinfer_version="0.7.2.post1")
        row = rows[d.function]
        assert row["sha256"] == d.sha256 and row["mHeadDimQk"] == 128
        assert row["mNumTokensPerPage"] == a.plan.kv_cache.page_size and row["mSM"] in (103, 10100)
        assert (row["mKernelType"] == 0) == (kernel_type == 0)

"""Issue 39's two H100 questions, settled by running FlashInfer 0.7.2.post1 against a float32 reference.

1. fa3 with an fp8_e5m2 query over an fp8_e5m2 cache (the prefill vLLM 0.33 runs on 9.0 with
   ``--kv-cache-dtype fp8_e5m2``: get_q_data_type quantizes the query to the cache dtype, FlashInfer's
   determine_attention_backend picks fa3, is_fa3_backend_supported accepts e5m2). attnplan's dtype.query says
   fa3 took e4m3 queries only (source-read; oracle exception kernel.fa3-e5m2-query until this probe). Called directly: the
   rules refuse the plan, so there is no plan to run it from. Whatever happens (build error, run error, NaN,
   error) is printed as one ``PROBE`` line for the log; the test asserts nothing about which way it goes - the
   rule is decided from the log, and ``test_fa3_e5m2_matches_the_rule`` then holds the rule to the outcome.
2. NVFP4 KV decode on tensor cores at GQA groups 1 and 2 on 9.0 (vLLM always passes use_tensor_cores=True:
   flashinfer.py _get_decode_wrapper): the rules' own vLLM plans, through the adapter, against the float32
   reference over the dequantized cache.
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, Batch, attention_ref, executor_for, prebuild, random_lens, real_plan, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu

# e5m2 has 2 mantissa bits: one rounding of q, K, V (and fa3's fp8 P.V) is up to 2^-3 relative; the bound
# is that unit roundoff (the e4m3 fa3 test uses e4m3's 2^-4 the same way: test_fp8_query_gpu.py).
TOL_E5M2 = 2.0 ** -3


def _fa3_e5m2(head_dim: int, heads: tuple[int, int], page: int = 16) -> dict:
    import flashinfer

    hq, hk = heads
    gen = torch.Generator(device="cuda").manual_seed(1234 + head_dim + hq)
    q_lens, kv_lens = [7, 33, 128], [40, 33, 700]
    pages = [(n + page - 1) // page for n in kv_lens]
    total = sum(pages)
    k_all = [torch.randn(n, hk, head_dim, device="cuda", generator=gen) for n in kv_lens]
    v_all = [torch.randn(n, hk, head_dim, device="cuda", generator=gen) for n in kv_lens]
    kc = torch.zeros(total, page, hk, head_dim, device="cuda").to(torch.float8_e5m2)
    vc = torch.zeros_like(kc)
    idx, start = [], 0
    for r, n in enumerate(kv_lens):
        ids = list(range(start, start + pages[r]))
        start += pages[r]
        idx += ids
        for t in range(n):
            kc[ids[t // page], t % page] = k_all[r][t].to(torch.float8_e5m2)
            vc[ids[t // page], t % page] = v_all[r][t].to(torch.float8_e5m2)
    q = torch.randn(sum(q_lens), hq, head_dim, device="cuda", generator=gen)
    qe = q.to(torch.float8_e5m2)
    i32 = dict(dtype=torch.int32, device="cuda")
    qo_indptr = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], **i32)
    kv_indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], **i32)
    last = torch.tensor([n - (p - 1) * page for n, p in zip(kv_lens, pages)], **i32)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    out: dict = {"head_dim": head_dim, "heads": heads}
    try:
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
        w.plan(qo_indptr, kv_indptr, torch.tensor(idx, **i32), last, hq, hk, head_dim, page, causal=True,
               q_data_type=torch.float8_e5m2, kv_data_type=torch.float8_e5m2, o_data_type=torch.bfloat16)
        o = w.run(qe, (kc, vc))
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the outcome is what is measured
        out.update(outcome="error", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return out
    sm = head_dim ** -0.5
    refs, t = [], 0
    for r, n in enumerate(q_lens):
        ref, _ = attention_ref(qe[t:t + n].float(), k_all[r].to(torch.float8_e5m2).float(),
                               v_all[r].to(torch.float8_e5m2).float(), sm_scale=sm, causal=True)
        refs.append(ref)
        t += n
    ref = torch.cat(refs)
    nan = bool(o.isnan().any())
    err = float("nan") if nan else ((o.float() - ref).norm() / ref.norm()).item()
    out.update(outcome="ran", nan=nan, rel_err=err, ok=(not nan and err <= TOL_E5M2))
    return out


E5M2_CASES = [(64, (8, 8)), (128, (16, 4)), (128, (32, 8))]


@pytest.mark.parametrize("head_dim, heads", E5M2_CASES)
def test_fa3_e5m2_query_probe(head_dim, heads):
    r = _fa3_e5m2(head_dim, heads)
    print("PROBE fa3-e5m2 " + json.dumps(r))
    path = os.environ.get("ATTNPLAN_PROBE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"probe": "fa3-e5m2-query", **r}) + "\n")


def test_fa3_e5m2_matches_the_rule():
    """The rule holds what the GPU does: refuses e5m2 queries on fa3 iff some probe fails."""
    from attnplan.policy import plan_for, simulated_node

    results = [_fa3_e5m2(h, heads) for h, heads in E5M2_CASES]
    runs = all(r.get("ok") for r in results)
    a = plan_for(dict(head_dim=128, num_qo_heads=16, num_kv_heads=4, dtype="bfloat16", kv_cache_dtype="fp8_e5m2",
                      attention_backend="flashinfer"), simulated_node("H100"))
    fa3_refused = any(v.rule == "dtype.query" and v.backend == "fa3" for v in a.violations) or \
        (a.ok and a.plan.prefill.flashinfer_backend != "fa3")
    print(f"fa3 e5m2 query: every probe ok {runs}; attnplan refuses fa3 there: {fa3_refused}")
    assert runs != fa3_refused


def _nvfp4_tc(group: int):
    cfg = dict(head_dim=128, num_qo_heads=8 * group, num_kv_heads=8, kv_cache_dtype="nvfp4")
    return real_plan(cfg, "vllm", lambda a: a.plan.decode.use_tensor_cores is True,
                     f"vLLM's tensor-core decode over nvfp4 at group {group}")


@pytest.mark.parametrize("group", [1, 2])
def test_nvfp4_tensor_core_decode_small_groups(group):
    a = _nvfp4_tc(group)
    prebuild(a)
    ex = executor_for(a)
    assert ex.plan.kv_cache.kv_view_dtype == "nvfp4"
    b = Batch(ex, [1] * 8, random_lens(8, 1, 2500), 8, k_scale=0.5)
    err = rel_err(b.run(), b.reference())
    print(f"PROBE nvfp4-tc-decode group {group}: {a.backends()} rel err {err:.2e}")
    assert err <= TOL

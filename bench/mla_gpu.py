"""MLA benchmark and rule probes on a GPU (DeepSeek-V3 attention: 128 heads, latent 512 + rope 64,
prefill (qk, vo) = (192, 128)).

    python3 bench/mla_gpu.py --out DIR

Decode: batch 1-128, context 1k-32k through the adapter on the plan the rules choose here and on
fa2 forced; achieved latent bandwidth (bytes of the latent rows read / time) over the measured
device-to-device copy bandwidth; adapter vs BatchMLAPagedAttentionWrapper called directly.
Prefill: one causal ragged request of 1k-8k tokens, TFLOP/s = heads x L(L+1)/2 x 2 x (192 + 128)
/ time, over the measured bf16 matmul rate.

Probes: what FlashInfer 0.7.2 on this GPU accepts beside what rules/packs/mla.yaml claims (fp8
latent caches, page sizes, latent widths), each run against the float32 reference. A probe that
fails records its error; none of them changes the rules.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

MLA = dict(num_qo_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
BATCHES = (1, 16, 64, 128)
CONTEXTS = (1024, 4096, 16384, 32768)
PREFILL_LENS = (1024, 2048, 4096, 8192)


def do_bench(fn, rep=200):
    from triton.testing import do_bench as tdb

    return tdb(fn, warmup=25, rep=rep, return_mode="median") * 1e-3


def ceilings():
    import torch

    n = 1 << 30
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_bw = 2 * n * 2 / do_bench(lambda: dst.copy_(src), rep=100)
    del src, dst
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return copy_bw, 2 * 8192 ** 3 / do_bench(lambda: a @ b)


def executor(**extra):
    from attnplan import AttentionConfig, require_plan

    from attnplan.adapter import AttentionExecutor

    return AttentionExecutor(require_plan(AttentionConfig(**MLA, **extra)), device="cuda")


def decode_sweep(ex, copy_bw, gen):
    import flashinfer
    import torch
    from flashinfer.mla import MLAPlanMetadata

    from attnplan.adapter import StepInput

    page = ex.plan.kv_cache.page_size
    max_tokens = max(BATCHES) * max(CONTEXTS)
    n_pages = max_tokens // page
    cache = ex.allocate_kv_cache(n_pages)
    cache.data.normal_()
    perm = torch.randperm(n_pages, device="cuda", generator=gen).int()
    ws = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for ctx in CONTEXTS:
        for bs in BATCHES:
            per = ctx // page
            table = perm[: bs * per].view(bs, per)
            seq = torch.full((bs,), ctx, dtype=torch.int32)
            step = ex.plan_step(StepInput([1] * bs, seq.cuda(), table, bs, seq_lens_cpu=seq))
            qn = torch.randn(bs, 128, 512, device="cuda", dtype=torch.bfloat16)
            qp = torch.randn(bs, 128, 64, device="cuda", dtype=torch.bfloat16)
            o = torch.empty_like(qn)
            t = do_bench(lambda: ex.mla_decode(step, qn, qp, cache, o))
            b = step.decode
            direct = flashinfer.BatchMLAPagedAttentionWrapper(ws, backend=ex.plan.decode.flashinfer_backend)
            direct.plan(metadata=MLAPlanMetadata.csr(b.qo_indptr_cpu, b.kv_page_indptr_cpu, b.kv_indices, b.seq_lens_cpu),
                        num_heads=128, head_dim_ckv=512, head_dim_kpe=64, page_size=page, causal=False,
                        sm_scale=ex.params.sm_scale, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                        query_layout="split", kv_cache_layout="packed")
            t_direct = do_bench(lambda: direct.run(query=(qn, qp), kv_cache=cache.kernel_view(), out=o))
            nbytes = bs * ctx * 576 * 2
            row = dict(kind="mla_decode", backend=ex.plan.decode.backend, batch=bs, context=ctx, adapter_us=t * 1e6,
                       direct_us=t_direct * 1e6, adapter_over_direct=t_direct / t, bw_TBs=nbytes / t / 1e12,
                       bw_over_copy=nbytes / t / copy_bw)
            rows.append(row)
            print(json.dumps(row))
    del cache
    torch.cuda.empty_cache()
    return rows


def prefill_sweep(ex, mm_rate):
    import torch

    from attnplan.adapter import StepInput

    rows = []
    for L in PREFILL_LENS:
        seq = torch.tensor([L], dtype=torch.int32)
        step = ex.plan_step(StepInput([L], seq.cuda(), torch.zeros(1, L // ex.plan.kv_cache.page_size + 1,
                                                                   dtype=torch.int32, device="cuda"), 0, seq_lens_cpu=seq))
        q, k = (torch.randn(L, 128, 192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(L, 128, 128, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(v)
        t = do_bench(lambda: ex.mla_prefill(step, q, k, v, o), rep=300)
        flops = 128 * L * (L + 1) / 2 * 2 * (192 + 128)
        row = dict(kind="mla_prefill", backend=ex.plan.prefill.backend, tokens=L, us=t * 1e6, tflops=flops / t / 1e12,
                   over_matmul=flops / t / mm_rate)
        rows.append(row)
        print(json.dumps(row))
    return rows


def _mla_ref(q, latent, rank, scale):
    from attnplan.adapter import attention_ref

    return attention_ref(q, latent.unsqueeze(1), latent[:, :rank].unsqueeze(1), sm_scale=scale, causal=False)[0]


def probe_native_mla(backend, *, kv_dtype="bfloat16", page=16, rank=512):
    """Run FlashInfer's MLA wrapper directly with one feature the rules refuse or leave out."""
    import flashinfer
    import torch
    from flashinfer.mla import MLAPlanMetadata

    heads, rope, bs, ctx = 16, 64, 4, 700
    per = (ctx + page - 1) // page
    lat = torch.randn(bs * per * page, rank + rope, device="cuda") * 0.5
    scale = 1 / math.sqrt(192)
    fp8 = kv_dtype != "bfloat16"
    store = lat.to(torch.float8_e4m3fn) if fp8 else lat.to(torch.bfloat16)
    cache = store.view(bs * per, page, rank + rope)
    ws = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchMLAPagedAttentionWrapper(ws, backend=backend)
    indptr = torch.arange(bs + 1, dtype=torch.int32) * per
    w.plan(metadata=MLAPlanMetadata.csr(torch.arange(bs + 1, dtype=torch.int32), indptr,
                                        torch.arange(bs * per, dtype=torch.int32, device="cuda"),
                                        torch.full((bs,), ctx, dtype=torch.int32)),
           num_heads=heads, head_dim_ckv=rank, head_dim_kpe=rope, page_size=page, causal=False, sm_scale=scale,
           q_data_type=torch.bfloat16, kv_data_type=store.dtype, query_layout="split", kv_cache_layout="packed")
    qn = torch.randn(bs, heads, rank, device="cuda", dtype=torch.bfloat16)
    qp = torch.randn(bs, heads, rope, device="cuda", dtype=torch.bfloat16)
    kw = dict(ckv_scale=1.0, kpe_scale=1.0) if fp8 else {}
    out = w.run(query=(qn, qp), kv_cache=cache, **kw)
    torch.cuda.synchronize()
    stored = store.float().view(bs, per * page, rank + rope)[:, :ctx]
    q = torch.cat([qn, qp], -1)
    ref = torch.cat([_mla_ref(q[r:r + 1], stored[r], rank, scale) for r in range(bs)])
    return ((out.float() - ref).norm() / ref.norm()).item()


def probe_ragged(backend, qk=192, vo=128):
    import flashinfer
    import torch

    from attnplan.adapter import attention_ref

    L, h = 300, 8
    q, k = (torch.randn(L, h, qk, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(L, h, vo, device="cuda", dtype=torch.bfloat16)
    ws = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
    ind = torch.tensor([0, L], dtype=torch.int32)
    w.plan(ind, ind, h, h, qk, head_dim_vo=vo, causal=True, q_data_type=torch.bfloat16)
    out = w.run(q, k, v)
    ref = attention_ref(q, k, v, sm_scale=1 / math.sqrt(qk))[0]
    return ((out.float() - ref).norm() / ref.norm()).item()


def probes(deadline):
    cases = [
        ("fa3-mla decode, bf16 latent (rules: allowed on 9.x)", lambda: probe_native_mla("fa3")),
        ("fa2-mla decode, bf16 latent (rules: allowed)", lambda: probe_native_mla("fa2")),
        ("fa2 ragged prefill qk192/vo128 (rules: allowed)", lambda: probe_ragged("fa2")),
        ("fa3 ragged prefill qk192/vo128 (rules: allowed)", lambda: probe_ragged("fa3")),
        ("fa3-mla page_size 1 (rules mla.page-size: 16/32/64 only)", lambda: probe_native_mla("fa3", page=1)),
        ("fa3-mla page_size 128 (rules mla.page-size: 16/32/64 only)", lambda: probe_native_mla("fa3", page=128)),
        ("fa3-mla fp8_e4m3 latent, bf16 query (rules mla.kv-dtype: 16-bit only)",
         lambda: probe_native_mla("fa3", kv_dtype="float8_e4m3fn")),
        ("fa2-mla fp8_e4m3 latent, bf16 query (rules mla.kv-dtype: 16-bit only)",
         lambda: probe_native_mla("fa2", kv_dtype="float8_e4m3fn")),
        ("fa3-mla kv_lora_rank 256 (rules mla.dims: 512 only)", lambda: probe_native_mla("fa3", rank=256)),
    ]
    results = []
    for name, fn in cases:
        if time.time() > deadline:
            results.append(dict(probe=name, ok=None, detail="skipped: out of time"))
            continue
        t0 = time.perf_counter()
        try:
            err = fn()
            results.append(dict(probe=name, ok=err <= 1e-2, rel_err=err, seconds=time.perf_counter() - t0))
        except Exception as exc:  # noqa: BLE001 - a refusal is a result
            results.append(dict(probe=name, ok=False, detail=f"{type(exc).__name__}: {str(exc)[:300]}",
                                seconds=time.perf_counter() - t0))
        print(json.dumps(results[-1]))
    return results


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--probe-seconds", type=float, default=240.0)
    ap.add_argument("--skip-sweep", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = dict(device=torch.cuda.get_device_name())
    copy_bw, mm_rate = ceilings()
    result.update(copy_bw_TBs=copy_bw / 1e12, matmul_TFLOPs=mm_rate / 1e12)
    print(f"{result['device']}: copy {copy_bw / 1e12:.2f} TB/s, matmul {mm_rate / 1e12:.0f} TFLOP/s")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    if not a.skip_sweep:
        for extra in ({}, {"attention_backend": "fa2"}):
            ex = executor(**extra)
            rep = ex.warmup()
            print(f"MLA {ex.answer.backends()}: {rep.summary()}")
            rows += decode_sweep(ex, copy_bw, gen)
            rows += prefill_sweep(ex, mm_rate)
    result["rows"] = rows
    (out / "mla_bench.json").write_text(json.dumps(result, indent=1))
    result["probes"] = probes(time.time() + a.probe_seconds)
    (out / "mla_bench.json").write_text(json.dumps(result, indent=1))
    print("\n| backend | batch | ctx | us | direct us | adapter/direct | latent TB/s | /copy |\n|---|---|---|---|---|---|---|---|")
    for x in rows:
        if x["kind"] == "mla_decode":
            print(f"| {x['backend']} | {x['batch']} | {x['context']} | {x['adapter_us']:.1f} | {x['direct_us']:.1f} | "
                  f"{x['adapter_over_direct']:.3f} | {x['bw_TBs']:.2f} | {x['bw_over_copy']:.2f} |")
    print("\n| backend | tokens | us | TFLOP/s | /matmul |\n|---|---|---|---|---|")
    for x in rows:
        if x["kind"] == "mla_prefill":
            print(f"| {x['backend']} | {x['tokens']} | {x['us']:.0f} | {x['tflops']:.0f} | {x['over_matmul']:.2f} |")
    print("\nprobes:")
    for p in result["probes"]:
        print(f"- {p['probe']}: {'OK' if p['ok'] else 'FAILED' if p['ok'] is False else 'skipped'} "
              f"{p.get('rel_err', '') if p.get('rel_err') is not None else ''} {p.get('detail', '')}")


if __name__ == "__main__":
    main()

"""Adapter benchmark on a GPU (Llama-3.1-8B attention: 32 q heads, 8 KV heads, head_dim 128).

    python3 bench/adapter_gpu.py --phase warmup --out DIR   # warm-up, cold then warm JIT cache
    python3 bench/adapter_gpu.py --phase sweep --out DIR    # decode and prefill sweeps
    python3 bench/adapter_gpu.py --phase pairs --out DIR    # small decode shapes, adapter/direct alternated
    python3 bench/adapter_gpu.py --phase host --out DIR     # host time and launches of a step's metadata

Ceilings measured here, not taken from a datasheet: device-to-device copy bandwidth (bytes read
plus written) and a bf16 8192^3 matmul. Decode: batch 1-256, context 1k-32k; adapter time per
layer vs the FlashInfer wrapper called directly with the same plan and vs torch SDPA on dense K/V;
achieved KV bandwidth = KV bytes read / time. Prefill: one causal request of 1k-16k tokens,
TFLOP/s = 2 GEMMs x 2 flops x heads x dim x L(L+1)/2 / time. Host time per step: plan_step (metadata
+ every wrapper's plan) vs the direct wrapper plan. Times: triton do_bench medians (L2 flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
DECODE_BATCHES = (1, 16, 64, 128, 256)
DECODE_CONTEXTS = (1024, 4096, 16384, 32768)
PREFILL_LENS = (1024, 2048, 4096, 8192, 16384)
MAX_CACHE_TOKENS = 8 * 1024 * 1024          # 32 GiB of bf16 K+V at this shape
SDPA_MAX_TOKENS = 1024 * 1024


def do_bench(fn, rep=200):
    from triton.testing import do_bench as tdb

    return tdb(fn, warmup=25, rep=rep, return_mode="median") * 1e-3      # seconds


def host_median(fn, n=20):
    import torch

    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def ceilings():
    import torch

    n = 1 << 30                                   # 2 GiB of bf16 each way
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = do_bench(lambda: dst.copy_(src), rep=100)
    copy_bw = 2 * n * 2 / t
    del src, dst
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = do_bench(lambda: a @ b, rep=200)
    return copy_bw, 2 * 8192 ** 3 / t


def executor():
    from attnplan import AttentionConfig, require_plan

    from attnplan.adapter import AttentionExecutor

    # Kernel truth (--engine flashinfer): fa3 prefill + fa2 decode on the H100, the wrappers this
    # bench calls directly beside the adapter (vLLM 0.33's layer decodes with XQA there:
    # bench/xqa_vs_fa2.py measures that).
    return AttentionExecutor(require_plan(AttentionConfig(**LLAMA), engine="flashinfer"), device="cuda")


def phase_warmup(out: Path, limit_s: float = 400.0) -> dict:
    """Warm-up in a fresh process, first with an empty JIT cache (compiles), then again (loads).
    The child runs in its own process group so a time-out takes its compilers down with it."""
    import signal

    results = {}
    cache_dir = os.environ.get("FLASHINFER_WORKSPACE_BASE") or tempfile.mkdtemp(prefix="fi-")
    env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=cache_dir)
    for label in ("cold", "warm"):
        report = out / f"warmup-{label}.json"
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--phase", "warmup-child", "--out", str(report)],
                                env=env, start_new_session=True)
        try:
            proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise SystemExit(f"warm-up ({label}) exceeded {limit_s:.0f}s")
        wall = time.perf_counter() - t0
        if proc.returncode or not report.exists():
            raise SystemExit(f"warm-up child failed ({label}, rc {proc.returncode})")
        rep = json.loads(report.read_text())
        rep["process_wall_s"] = wall
        results[label] = rep
        print(f"warm-up {label}: {rep['summary']} (process {wall:.1f}s)")
    (out / "warmup.json").write_text(json.dumps(results, indent=1))
    return results


def phase_warmup_child(report_path: Path) -> None:
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(60, repeat=True)      # where it is, should a step stall

    t0 = time.perf_counter()
    ex = executor()                                   # includes the startup check (live probe)
    t_check = time.perf_counter() - t0
    report = ex.warmup(progress=lambda e: print(f"  [{time.perf_counter() - t0:6.1f}s] {e}", flush=True))
    torch.cuda.synchronize()
    report_path.write_text(json.dumps(dict(
        summary=report.summary(), seconds=report.seconds, build_seconds=report.build_seconds,
        startup_check_s=t_check, batch_kinds=report.batch_kinds, modules=[m.__dict__ for m in report.modules],
        compiled_late=report.compiled_during_exercise)))


def phase_smoke() -> None:
    """One step of each batch kind, timed, printing the stack every 40 s if anything stalls."""
    import faulthandler

    import torch

    from attnplan.adapter.warmup import exercise

    faulthandler.dump_traceback_later(40, repeat=True)
    t0 = time.perf_counter()
    ex = executor()
    print(f"[{time.perf_counter() - t0:6.1f}s] executor built; plan {ex.answer.backends()}", flush=True)
    for kind in ("prefill_only", "decode_only", "mixed"):
        exercise(ex, kind)
        torch.cuda.synchronize()
        print(f"[{time.perf_counter() - t0:6.1f}s] {kind} step done", flush=True)
    faulthandler.cancel_dump_traceback_later()


class DecodeCase:
    """One decode shape, timed two ways on the same cache, block table and query: the adapter
    (plan_step + forward) and the FlashInfer wrapper the plan names, planned by hand."""

    def __init__(self, ex, cache, perm, ws, bs: int, ctx: int):
        import flashinfer
        import torch

        from attnplan.adapter import StepInput

        page = ex.plan.kv_cache.page_size
        per = ctx // page
        table = perm[: bs * per].view(bs, per)
        seq = torch.full((bs,), ctx, dtype=torch.int32)
        self.ex, self.cache = ex, cache
        self.inp = StepInput([1] * bs, seq.cuda(), table, bs, seq_lens_cpu=seq)
        self.q = torch.randn(bs, 32, 128, device="cuda", dtype=torch.bfloat16)
        self.o = torch.empty_like(self.q)
        self.step = ex.plan_step(self.inp)
        dec = ex.plan.decode
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=bool(dec.use_tensor_cores),
                                                                     backend=dec.flashinfer_backend)
        b = self.step.decode
        self.plan_direct = lambda: self.wrapper.plan(b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, 32, 8, 128,
                                                     page, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                                                     non_blocking=True)
        self.plan_direct()

    def adapter(self, rep=200) -> float:
        return do_bench(lambda: self.ex.forward(self.step, self.q, self.cache, self.o), rep=rep)

    def direct(self, rep=200) -> float:
        return do_bench(lambda: self.wrapper.run(self.q, self.cache.kernel_view(), out=self.o), rep=rep)


def phase_pairs(out: Path, rounds: int = 7) -> dict:
    """The small decode shapes, where one sweep's adapter/direct ratio can land under 0.97 on a
    ~20 us kernel: adapter and direct timed alternately, `rounds` times each, same inputs."""
    import statistics

    import torch

    ex = executor()
    ex.warmup()
    page = ex.plan.kv_cache.page_size
    n_pages = 16 * 32768 // page
    cache = ex.allocate_kv_cache(n_pages)
    cache.data.normal_()
    ws = torch.zeros(ex.plan.decode.workspace_bytes, dtype=torch.uint8, device="cuda")
    perm = torch.randperm(n_pages, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0)).int()
    rows = []
    for ctx in DECODE_CONTEXTS:
        for bs in (1, 16):
            d = DecodeCase(ex, cache, perm, ws, bs, ctx)
            ratios, ta, td = [], [], []
            for _ in range(rounds):
                a, b = d.adapter(), d.direct()
                ta.append(a * 1e6)
                td.append(b * 1e6)
                ratios.append(b / a)
            row = dict(batch=bs, context=ctx, rounds=rounds, adapter_us_median=statistics.median(ta),
                       direct_us_median=statistics.median(td), ratio_median=statistics.median(ratios),
                       ratio_min=min(ratios), ratio_max=max(ratios))
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = dict(device=torch.cuda.get_device_name(), rows=rows)
    (out / "adapter_pairs.json").write_text(json.dumps(result, indent=1))
    print("| batch | ctx | adapter us | direct us | adapter/direct median | min | max |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['context']} | {r['adapter_us_median']:.1f} | {r['direct_us_median']:.1f} | "
              f"{r['ratio_median']:.3f} | {r['ratio_min']:.3f} | {r['ratio_max']:.3f} |")
    return result


HOST_SHAPES = ((1, 4096, 0, 0), (64, 4096, 0, 0), (256, 4096, 0, 0), (256, 32768, 0, 0), (64, 4096, 4, 512),
               (0, 0, 1, 8192), (0, 0, 8, 1024))


def phase_host(out: Path, rounds: int = 5) -> dict:
    """Host cost of a step's metadata (build_step), no kernels compiled: the median of `rounds`
    medians of 100 calls each, and the CUDA launches and copies one step issues (counted by the
    profiler; unlike host times on a shared host, the count does not drift between runs)."""
    import statistics

    import torch
    from torch.profiler import ProfilerActivity, profile

    from attnplan.adapter import StepInput, build_step
    from attnplan import AttentionConfig, require_plan

    plan = require_plan(AttentionConfig(**LLAMA)).plan
    page = plan.kv_cache.page_size
    rows = []
    for bs, ctx, npre, plen in HOST_SHAPES:
        n, per = bs + npre, (max(ctx, plen) + page - 1) // page
        table = torch.randperm(n * per + 5, dtype=torch.int32, device="cuda")[: n * per].view(n, per)
        seq = torch.tensor([ctx] * bs + [plen] * npre, dtype=torch.int32)
        inp = StepInput([1] * bs + [plen] * npre, seq.cuda(), table, bs, seq_lens_cpu=seq)
        for _ in range(30):
            build_step(plan, inp)
        times = [host_median(lambda: build_step(plan, inp), n=100) * 1e6 for _ in range(rounds)]
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            build_step(plan, inp)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events()]
        launches = sum(x.startswith(("cudaLaunchKernel", "cuLaunchKernel")) for x in names)
        copies = sum(x.startswith("cudaMemcpyAsync") for x in names)
        row = dict(batch=bs, context=ctx, prefill_reqs=npre, prefill_tokens=plen, metadata_us=statistics.median(times),
                   metadata_us_min=min(times), metadata_us_max=max(times), launches=launches, copies=copies)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = dict(device=torch.cuda.get_device_name(), rows=rows)
    (out / "adapter_host.json").write_text(json.dumps(result, indent=1))
    print("| decode batch x ctx | prefill reqs x tokens | build_step us (median of 5) | range | launches | H2D copies |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} x {r['context']} | {r['prefill_reqs']} x {r['prefill_tokens']} | {r['metadata_us']:.0f} | "
              f"{r['metadata_us_min']:.0f}-{r['metadata_us_max']:.0f} | {r['launches']} | {r['copies']} |")
    return result


def phase_sweep(out: Path) -> dict:
    import flashinfer
    import torch
    import torch.nn.functional as F

    from attnplan.adapter import StepInput, build_step

    dev_name = torch.cuda.get_device_name()
    copy_bw, mm_rate = ceilings()
    print(f"{dev_name}: copy {copy_bw / 1e12:.2f} TB/s (read+write), bf16 matmul {mm_rate / 1e12:.0f} TFLOP/s")
    ex = executor()
    ex.warmup()
    plan = ex.plan
    page = plan.kv_cache.page_size
    n_pages = MAX_CACHE_TOKENS // page
    cache = ex.allocate_kv_cache(n_pages)
    cache.data.normal_()
    ws = torch.zeros(plan.decode.workspace_bytes, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    perm = torch.randperm(n_pages, device="cuda", generator=gen).int()
    rows = []

    for ctx in DECODE_CONTEXTS:
        for bs in DECODE_BATCHES:
            if bs * ctx > MAX_CACHE_TOKENS:
                continue
            d = DecodeCase(ex, cache, perm, ws, bs, ctx)
            t_host = host_median(lambda: ex.plan_step(d.inp), n=50)
            t_meta = host_median(lambda: build_step(ex.plan, d.inp), n=50)
            t_adapter, t_direct = d.adapter(), d.direct()
            t_host_direct = host_median(d.plan_direct)
            q = d.q
            kv_bytes = bs * ctx * 8 * 128 * 2 * 2
            row = dict(kind="decode", batch=bs, context=ctx, adapter_us=t_adapter * 1e6, direct_us=t_direct * 1e6,
                       adapter_over_direct=t_direct / t_adapter, kv_bw_TBs=kv_bytes / t_adapter / 1e12,
                       bw_over_copy=kv_bytes / t_adapter / copy_bw, host_step_us=t_host * 1e6,
                       host_metadata_us=t_meta * 1e6, host_direct_plan_us=t_host_direct * 1e6)
            if bs * ctx <= SDPA_MAX_TOKENS:
                k = torch.randn(bs, 8, ctx, 128, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)
                qs = q.view(bs, 32, 1, 128)
                t_sdpa = do_bench(lambda: F.scaled_dot_product_attention(qs, k, v, enable_gqa=True))
                row["sdpa_us"] = t_sdpa * 1e6
                row["adapter_over_sdpa"] = t_sdpa / t_adapter
                del k, v
            rows.append(row)
            print(json.dumps(row))

    del cache
    torch.cuda.empty_cache()
    for L in PREFILL_LENS:
        per = (L + page - 1) // page
        cache = ex.allocate_kv_cache(per)
        cache.data.normal_()
        table = torch.randperm(per, device="cuda", generator=gen).int().view(1, per)
        seq = torch.tensor([L], dtype=torch.int32)
        inp = StepInput([L], seq.cuda(), table, 0, seq_lens_cpu=seq)
        q = torch.randn(L, 32, 128, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        step = ex.plan_step(inp)
        t_host = host_median(lambda: ex.plan_step(inp), n=50)
        t_meta = host_median(lambda: build_step(ex.plan, inp), n=50)
        t_adapter = do_bench(lambda: ex.forward(step, q, cache, o), rep=300)
        direct = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=plan.prefill.flashinfer_backend)
        b = step.prefill
        direct.plan(b.qo_indptr_cpu, b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, 32, 8, 128, page,
                    causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        t_direct = do_bench(lambda: direct.run(q, cache.kernel_view(), out=o), rep=300)
        kv = cache.kernel_view()
        k = kv[table[0].long(), 0].reshape(-1, 8, 128)[:L].transpose(0, 1).unsqueeze(0).contiguous()
        v = kv[table[0].long(), 1].reshape(-1, 8, 128)[:L].transpose(0, 1).unsqueeze(0).contiguous()
        qs = q.transpose(0, 1).unsqueeze(0)
        t_sdpa = do_bench(lambda: F.scaled_dot_product_attention(qs, k, v, is_causal=True, enable_gqa=True), rep=300)
        flops = 2 * 2 * 32 * 128 * L * (L + 1) / 2
        row = dict(kind="prefill", tokens=L, adapter_us=t_adapter * 1e6, direct_us=t_direct * 1e6,
                   adapter_over_direct=t_direct / t_adapter, sdpa_us=t_sdpa * 1e6, adapter_over_sdpa=t_sdpa / t_adapter,
                   tflops=flops / t_adapter / 1e12, over_matmul=flops / t_adapter / mm_rate, host_step_us=t_host * 1e6,
                   host_metadata_us=t_meta * 1e6)
        rows.append(row)
        print(json.dumps(row))
        del cache, k, v
    result = dict(device=dev_name, copy_bw_TBs=copy_bw / 1e12, matmul_TFLOPs=mm_rate / 1e12,
                  plan=dict(prefill=plan.prefill.backend, decode=plan.decode.backend,
                            decode_use_tensor_cores=plan.decode.use_tensor_cores, page_size=page),
                  flashinfer=flashinfer.__version__, torch=torch.__version__, rows=rows)
    (out / "adapter_bench.json").write_text(json.dumps(result, indent=1))
    print_tables(result)
    return result


def print_tables(r: dict) -> None:
    print(f"\n{r['device']} | copy {r['copy_bw_TBs']:.2f} TB/s | matmul {r['matmul_TFLOPs']:.0f} TFLOP/s | plan {r['plan']}")
    print("| batch | ctx | adapter us | direct us | adapter/direct | KV TB/s | /copy | SDPA us | adapter/SDPA | host step us | of which metadata | direct plan us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in r["rows"]:
        if x["kind"] == "decode":
            sd = f"{x['sdpa_us']:.1f} | {x['adapter_over_sdpa']:.2f}" if "sdpa_us" in x else "- | -"
            print(f"| {x['batch']} | {x['context']} | {x['adapter_us']:.1f} | {x['direct_us']:.1f} | {x['adapter_over_direct']:.3f} | "
                  f"{x['kv_bw_TBs']:.2f} | {x['bw_over_copy']:.2f} | {sd} | {x['host_step_us']:.0f} | {x['host_metadata_us']:.0f} | {x['host_direct_plan_us']:.0f} |")
    print("\n| tokens | adapter us | direct us | adapter/direct | TFLOP/s | /matmul | SDPA us | adapter/SDPA | host step us | of which metadata |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in r["rows"]:
        if x["kind"] == "prefill":
            print(f"| {x['tokens']} | {x['adapter_us']:.1f} | {x['direct_us']:.1f} | {x['adapter_over_direct']:.3f} | {x['tflops']:.0f} | "
                  f"{x['over_matmul']:.2f} | {x['sdpa_us']:.1f} | {x['adapter_over_sdpa']:.2f} | {x['host_step_us']:.0f} | {x['host_metadata_us']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=("warmup", "warmup-child", "smoke", "sweep", "pairs", "host"), required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    out = Path(a.out)
    if a.phase != "warmup-child":
        out.mkdir(parents=True, exist_ok=True)
    if a.phase == "warmup":
        phase_warmup(out)
    elif a.phase == "warmup-child":
        phase_warmup_child(Path(a.out))
    elif a.phase == "smoke":
        phase_smoke()
    elif a.phase == "pairs":
        phase_pairs(out)
    elif a.phase == "host":
        phase_host(out)
    else:
        phase_sweep(out)


if __name__ == "__main__":
    main()

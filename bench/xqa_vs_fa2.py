"""XQA vs fa2 decode on the H100, the XQA probes, and decode steps end to end (issues 12.5, 17).

    python3 bench/xqa_vs_fa2.py --phase probe --out DIR    # XQA stale slots, fp8 query, nvfp4 append
    python3 bench/xqa_vs_fa2.py --phase decode --out DIR   # kernel time + host time + graph steps
    python3 bench/xqa_vs_fa2.py --phase choice --out DIR   # the plan's per-shape decode choice (issue 41.3)

Shape: Llama-3.1-8B attention (32 q heads, 8 KV heads, head_dim 128, bf16 KV, page 16), batch
1-256 x context 1k-32k, one cache shared by both backends (NHD: XQA and fa2 read the same pages).
Kernel: CUDA-event medians (triton do_bench, L2 flushed) of one decode call through the adapter.
Host: medians of plan_step (metadata + FlashInfer's plan for fa2; metadata alone for XQA, which
plans nothing). Step end to end: N back-to-back decode steps, one CUDA graph per batch size,
wall time / N with one synchronize at the end (host work of step i+1 overlaps the device work
of step i, as in a serving loop): the adapter's ``DecodeGraph`` for XQA (host: copy lengths and
block table, replay a graph holding slots + append + attention), the adapter's ``DecodeGraph`` for
fa2 (host: the same copies + FlashInfer's plan; metadata in the graph; replay) and FlashInfer's own CUDA-graph decode wrapper
(host: FlashInfer's plan from prepared host arrays, replay).

Choice (issue 41 item 3): the rules' own ``--engine flashinfer`` plan on this node, which carries both
decode calls and the measured boundary (``plan.decode_choice``, rules/decode_choice.yaml). Per shape,
through that one executor and one cache: each decode call forced (``backend.forced_decode``) and the
one the adapter picks itself, CUDA-event medians of the decode call; whether the pick is within 2 % of
the fastest valid one; the two calls' outputs against each other; ``plan_step`` host medians.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
BATCHES = (1, 4, 16, 64, 128, 256)
CONTEXTS = (1024, 4096, 16384, 32768)
PAGE = 16


def do_bench(fn, rep_ms=150):
    from triton.testing import do_bench as tdb

    return tdb(fn, warmup=20, rep=rep_ms, return_mode="median") * 1e-3


def host_median(fn, n=30):
    import torch

    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def plan(backend: str, **cfg):
    """The rules' own plan on the probed node (tests/gpu/gpu_common.py plan_or_raise, as the GPU
    tests build them): ``fa2`` decode is the kernel-truth plan here, ``xqa`` is vLLM 0.33's decode
    on 9.0 (serving facts declared). SystemExit naming why when the rules plan no such path."""
    from gpu_common import NoRealPlan, plan_or_raise

    cfg = dict(cfg)
    page = cfg.pop("page_size", PAGE)
    want = {"fa2": ("flashinfer", lambda a: a.plan.decode.flashinfer_backend == "fa2"),
            "xqa": ("vllm", lambda a: a.plan.decode.call == "xqa_decode")}[backend]
    try:
        return plan_or_raise(dict(LLAMA, page_size=page, **cfg), want[0],
                             lambda a: want[1](a) and a.plan.kv_cache.page_size == page, f"{backend} decode {cfg}")
    except NoRealPlan as exc:
        raise SystemExit(f"xqa_vs_fa2: {exc}") from None


def executor(backend: str, **cfg):
    from gpu_common import executor_for

    return executor_for(plan(backend, **cfg))


def executors():
    return executor("fa2"), executor("xqa")


# -- probes ---------------------------------------------------------------------------------------
def say(what: str, value):
    print(what, json.dumps(value), flush=True)
    return value


def fp8_gemm_reference(b, p_scale: float):
    """Decode attention with both GEMMs' operands in e4m3, as a Hopper fp8 kernel computes it:
    q and the dequantized K/V rounded to e4m3, and the unnormalised probabilities exp(s - max),
    times ``p_scale``, rounded to e4m3 before P V (the row sums kept in float32)."""
    import torch

    e4 = torch.float8_e4m3fn
    p = b.ex.params
    outs, t = [], 0
    for r, (L, n) in enumerate(zip(b.seq, b.q_lens)):
        q = b.q[t:t + n].float().to(e4).float()
        k = b.ks[r].float().to(e4).float().repeat_interleave(p.num_qo_heads // p.num_kv_heads, 1)
        v = b.vs[r].float().to(e4).float().repeat_interleave(p.num_qo_heads // p.num_kv_heads, 1)
        s = torch.einsum("qhd,khd->hqk", q, k) * p.sm_scale
        e = torch.exp(s - s.amax(-1, keepdim=True))
        pq = (e * p_scale).to(e4).float() / p_scale
        outs.append(torch.einsum("hqk,khd->qhd", pq, v) / e.sum(-1).transpose(0, 1).unsqueeze(-1))
        t += n
    return torch.cat(outs)


def phase_probe(out: Path) -> dict:
    import torch
    from gpu_common import Batch, random_lens, rel_err

    res: dict = {}
    ex = executor("xqa")
    page = ex.plan.kv_cache.page_size
    # 1. NaN in the unused slots of each request's last page only (everything else finite).
    b = Batch(ex, [1] * 16, [s for s in random_lens(16, 20, 900) if True], 16, poison="finite")
    seq = b.seq
    for r, s in enumerate(seq):
        if s % page:
            pg = int(b.table[r, (s - 1) // page])
            b.cache.data[pg, :, s % page:] = float("nan")
    out1 = b.run()
    res["nan_in_last_page_tail"] = say("nan_in_last_page_tail", dict(nan_rows=int(out1.isnan().any(-1).any(-1).sum()), rows=len(seq),
                                        requests_with_a_tail=sum(1 for s in seq if s % page)))
    # 1b. The same over an fp8 KV cache (0x7F is NaN in e4m3): XQA's Hopper fp8 kernel.
    ex8 = executor("xqa", kv_cache_dtype="fp8")
    b8 = Batch(ex8, [1] * 16, random_lens(16, 20, 900), 16, poison="finite")
    for r, s in enumerate(b8.seq):
        if s % page:
            b8.cache.data[int(b8.table[r, (s - 1) // page]), :, s % page:] = 0x7F
    o8 = b8.run()
    res["nan_in_last_page_tail_fp8"] = say("nan_in_last_page_tail_fp8", dict(
        nan_rows=int(o8.isnan().any(-1).any(-1).sum()), rows=16,
        rel_err=None if o8.isnan().any() else rel_err(o8, b8.reference())))
    # 2. NaN in pages past each request's last one (block-table entries it does not use).
    b2 = Batch(ex, [1] * 16, random_lens(16, 20, 900), 16, poison="finite")
    used = {int(b2.table[r, p]) for r, s in enumerate(b2.seq) for p in range((s - 1) // page + 1)}
    for pg in range(b2.cache.num_pages):
        if pg not in used:
            b2.cache.data[pg] = float("nan")
    out2 = b2.run()
    res["nan_in_unused_pages"] = say("nan_in_unused_pages", dict(
        nan_rows=int(out2.isnan().any(-1).any(-1).sum()),
        rel_err=None if out2.isnan().any() else rel_err(out2, b2.reference())))
    # 3. fp8 KV, bf16 query: error against the bf16-query and the fp8-query reference.
    fa8 = executor("fa2", kv_cache_dtype="fp8")
    errs = []
    for e in (ex8, fa8):
        bb = Batch(e, [1] * 32, random_lens(32, 1, 3000), 32, poison="finite")
        o = bb.run()
        row = dict(call=e.plan.decode.call, vs_bf16_q=rel_err(o, bb.reference()),
                   vs_fp8_q=rel_err(o, bb.reference(q_dtype=torch.float8_e4m3fn)))
        for p_scale in (1.0, 448.0):
            row[f"vs_fp8_q_and_P_x{p_scale:g}"] = rel_err(o, fp8_gemm_reference(bb, p_scale))
        errs.append(say("fp8_kv_query", row))
    res["fp8_kv_query"] = errs
    # 4. FlashInfer's own NVFP4 append on 9.0, against the adapter's torch quantizer.
    try:
        import flashinfer

        from attnplan.adapter import nvfp4

        n, h, d = 256, 8, 128
        k = torch.randn(n, h, d, device="cuda").bfloat16()
        v = torch.randn(n, h, d, device="cuda").bfloat16()
        data = torch.zeros(n // PAGE, 2, PAGE, h, d // 2, dtype=torch.uint8, device="cuda")
        sf = torch.zeros(n // PAGE, 2, PAGE, h, d // 16, dtype=torch.float8_e4m3fn, device="cuda")
        flashinfer.nvfp4_quantize_append_paged_kv_cache_with_slot_mapping(
            k, v, torch.arange(n, device="cuda"), data, sf, 1.0, 1.0, kv_layout="NHD")
        torch.cuda.synchronize()
        pk, sk = nvfp4.quantize(k, 16, 1.0)
        theirs = data[:, 0].reshape(n, h, d // 2)
        res["flashinfer_nvfp4_append_sm90"] = say("flashinfer_nvfp4_append_sm90", dict(
            ran=True, packed_bytes_equal=float((theirs == pk).float().mean()),
            scales_equal=float((sf[:, 0].reshape(n, h, d // 16).float() == sk.float()).float().mean())))
    except Exception as exc:  # noqa: BLE001 - record what 9.0 says
        res["flashinfer_nvfp4_append_sm90"] = say("flashinfer_nvfp4_append_sm90",
                                                  dict(ran=False, error=f"{type(exc).__name__}: {str(exc)[:300]}"))
    (out / "xqa-probe.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return res


# -- decode ---------------------------------------------------------------------------------------
def decode_shape(params, num_pages: int, bs: int, ctx: int):
    """One decode-only batch of ``bs`` requests at ``ctx`` tokens each over random pages of a cache of
    ``num_pages``: (StepInput, block table, bf16 query). Every phase times the same kind of batch."""
    import torch

    from attnplan.adapter import StepInput

    width = ctx // PAGE
    table = torch.randperm(num_pages, device="cuda", dtype=torch.int32)[: bs * width].view(bs, width)
    seq_cpu = torch.full((bs,), ctx, dtype=torch.int32)
    inp = StepInput([1] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
    q = torch.randn(bs, params.num_qo_heads, params.head_dim_qk, device="cuda").bfloat16()
    return inp, table, q


def phase_decode(out: Path, batches=BATCHES, contexts=CONTEXTS, steps: int = 50) -> dict:
    import flashinfer
    import torch


    fa2, xqa = executors()
    max_tokens = max(batches) * max(contexts)
    num_pages = max_tokens // PAGE
    cache = fa2.allocate_kv_cache(num_pages)
    cache.data.view(torch.bfloat16).normal_()             # random, never zeros (METHOD.md)
    p = fa2.params
    rows = []
    for bs in batches:
        for ctx in contexts:
            inp, table, q = decode_shape(p, num_pages, bs, ctx)
            o = torch.empty_like(q)
            row = dict(batch=bs, ctx=ctx)
            for name, ex in (("fa2", fa2), ("xqa", xqa)):
                step = ex.plan_step(inp)
                ex.forward(step, q, cache, o)
                torch.cuda.synchronize()
                row[f"{name}_us"] = do_bench(lambda: ex.forward(step, q, cache, o)) * 1e6
                row[f"{name}_plan_step_us"] = host_median(lambda: ex.plan_step(inp)) * 1e6
            from attnplan.adapter.metadata import build_step

            def metadata_only():
                s = build_step(fa2.plan, inp, fa2._staging)      # the executor's pinned staging ring
                fa2._staging.release(s.extra["staging_slot"])
            row["metadata_us"] = host_median(metadata_only) * 1e6
            kv_bytes = 2 * bs * ctx * p.num_kv_heads * p.head_dim_qk * 2
            row["kv_tb_s_fa2"] = kv_bytes / row["fa2_us"] / 1e6
            row["kv_tb_s_xqa"] = kv_bytes / row["xqa_us"] / 1e6
            # FlashInfer's plan alone, same host arrays (what plan_step is held against).
            s = fa2.plan_step(inp)
            w = fa2.backend._decode
            b = s.decode
            row["fi_plan_us"] = host_median(lambda: w.plan(
                b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, 32, 8, 128, PAGE, q_data_type=torch.bfloat16,
                kv_data_type=torch.bfloat16, o_data_type=torch.bfloat16, non_blocking=True, seq_lens=b.seq_lens_cpu)) * 1e6
            # End to end, one graph per batch size.
            row.update(graph_steps(fa2, xqa, cache, inp, table, q, steps))
            rows.append(row)
            print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            del table
    res = dict(rows=rows, device=torch.cuda.get_device_name(), flashinfer=flashinfer.__version__, torch=torch.__version__)
    (out / "xqa-decode.json").write_text(json.dumps(res, indent=1))
    print_table(rows)
    return res


def choice_executor():
    """The rules' own --engine flashinfer plan with a per-shape decode choice on this node, or SystemExit
    naming why not (no measured boundary for this GPU / FlashInfer / config: nothing to check)."""
    from gpu_common import NoRealPlan, executor_for, plan_or_raise

    try:
        a = plan_or_raise(dict(LLAMA, page_size=PAGE), "flashinfer", lambda a: a.plan.decode_choice is not None,
                          "a per-shape decode choice (rules/decode_choice.yaml)")
    except NoRealPlan as exc:
        raise SystemExit(f"xqa_vs_fa2 --phase choice: {exc}") from None
    return executor_for(a)


ROUNDS = 5             # interleaved timing rounds per shape in --phase choice (best kept)


def phase_choice(out: Path, batches=BATCHES, contexts=CONTEXTS, tol: float = 0.02) -> dict:
    import flashinfer
    import torch

    from attnplan.adapter.calls import batch_pages

    from attnplan.adapter.warmup import plan_modules, prebuild

    ex = choice_executor()
    # the decode calls' modules only (decode steps alone run here; 9.0's fa3 prefill takes minutes to build)
    prebuild([m for m in plan_modules(ex.plan) if m.phase == "decode"])
    plan, choice = ex.plan, ex.plan.decode_choice
    calls = [pp.call for pp in (plan.decode, choice.alternative)]
    print(json.dumps(dict(choice=choice.id, small=choice.small, large=choice.large,
                          small_up_to_kv_tokens=choice.small_up_to_kv_tokens, calls=calls)), flush=True)
    num_pages = max(batches) * max(contexts) // PAGE
    cache = ex.allocate_kv_cache(num_pages)
    cache.data.view(torch.bfloat16).normal_()             # random, never zeros (METHOD.md)
    p = ex.params
    rows = []
    for bs in batches:
        for ctx in contexts:
            inp, table, q = decode_shape(p, num_pages, bs, ctx)
            row = dict(batch=bs, ctx=ctx, kv_tokens=bs * ctx)
            outs = []
            for index, call in enumerate(calls):
                with ex.backend.forced_decode(index):
                    step = ex.plan_step(inp)
                    row[f"{call}_plan_step_us"] = host_median(lambda: ex.plan_step(inp)) * 1e6
                o = torch.empty_like(q)
                ex.forward(step, q, cache, o)
                torch.cuda.synchronize()
                outs.append(o.float())
            step = ex.plan_step(inp)                           # the adapter's own pick
            picked = step.extra["decode_context"].plan.decode.call
            assert ex.decode_call_for(batch_pages(step.decode, PAGE)).call == picked
            row["chosen"] = picked
            row["chosen_plan_step_us"] = host_median(lambda: ex.plan_step(inp)) * 1e6
            # Each call forced, and the pick, timed in interleaved rounds (each re-planned before it is timed:
            # a shape's metadata buffers hold the last step planned), the best round kept: a microsecond
            # kernel timed once swings by 2x between back-to-back measurements (2026-11-26 call A, 1 x 1k).
            o = torch.empty_like(q)
            best = {k: float("inf") for k in (*calls, "chosen")}
            for _ in range(ROUNDS):
                for index, call in (*enumerate(calls), (None, "chosen")):
                    if index is None:
                        step = ex.plan_step(inp)
                    else:
                        with ex.backend.forced_decode(index):
                            step = ex.plan_step(inp)
                    best[call] = min(best[call], do_bench(lambda: ex.forward(step, q, cache, o)) * 1e6)
            for call in calls:
                row[f"{call}_us"] = best[call]
            row["chosen_us"] = best["chosen"]
            row["rounds"] = ROUNDS
            fastest = min(row[f"{c}_us"] for c in calls)
            row["chosen_vs_fastest"] = row["chosen_us"] / fastest
            row["within_2pct"] = row["chosen_vs_fastest"] <= 1 + tol
            row["calls_rel_diff"] = ((outs[0] - outs[1]).norm() / outs[1].norm()).item()
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            del table
    res = dict(rows=rows, choice=choice.model_dump(mode="json", exclude={"alternative"}), calls=calls,
               all_within_2pct=all(r["within_2pct"] for r in rows), device=torch.cuda.get_device_name(),
               flashinfer=flashinfer.__version__, torch=torch.__version__)
    (out / "decode-choice.json").write_text(json.dumps(res, indent=1))
    print(f"| batch | ctx | KV tokens | {calls[0]} us | {calls[1]} us | picked | picked us | picked / fastest | within 2 % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['ctx']} | {r['kv_tokens']} | {r[calls[0] + '_us']:.1f} | {r[calls[1] + '_us']:.1f} "
              f"| {r['chosen']} | {r['chosen_us']:.1f} | {r['chosen_vs_fastest']:.3f} | {'yes' if r['within_2pct'] else 'NO'} |")
    print(f"chosen within 2 % of the fastest valid decode call on every shape: {res['all_within_2pct']}", flush=True)
    return res


def phase_host_profile(out: Path, batches=(1, 256), ctx: int = 4096, n: int = 300) -> None:
    """Where a step's host time goes: cProfile of ``build_step`` and of ``plan_step`` (fa2)."""
    import cProfile
    import io
    import pstats

    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter.metadata import build_step

    fa2, _ = executors()
    text = []
    for bs in batches:
        width = ctx // PAGE
        table = torch.randperm(bs * width, device="cuda", dtype=torch.int32).view(bs, width)
        seq_cpu = torch.full((bs,), ctx, dtype=torch.int32)
        inp = StepInput([1] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
        def metadata_only():
            s = build_step(fa2.plan, inp, fa2._staging)
            fa2._staging.release(s.extra["staging_slot"])

        for name, fn in (("build_step", metadata_only),
                         ("plan_step", lambda: fa2.plan_step(inp))):
            for _ in range(30):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            per = (time.perf_counter() - t0) / n * 1e6
            torch.cuda.synchronize()
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(n):
                fn()
            pr.disable()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(18)
            text.append(f"== {name} batch {bs} ctx {ctx}: {per:.1f} us per call (no profiler)\n{buf.getvalue()}")
            print(text[-1][:3000], flush=True)
    (out / "host-profile.txt").write_text("\n".join(text))


def graph_steps(fa2, xqa, cache, inp, table, q, steps: int) -> dict:
    """Per-step wall time of ``steps`` back-to-back graph decode steps (one sync at the end)."""
    import flashinfer
    import torch

    from attnplan.adapter import DecodeGraph

    bs = table.shape[0]
    res = {}
    k_new = torch.randn(bs, 8, 128, device="cuda").bfloat16()
    v_new = torch.randn(bs, 8, 128, device="cuda").bfloat16()
    # Adapter, XQA: the host copies lengths + block table; the graph holds slots, append, attention.
    g = DecodeGraph(xqa, bs, table.shape[1], cache)
    g.update(inp.seq_lens, table)
    g.capture()

    def xqa_step():
        g.update(inp.seq_lens, table)
        g.graph.replay()
    res["graph_xqa_step_us"] = loop(xqa_step, steps)
    res["graph_xqa_host_us"] = host_only(xqa_step, steps)
    # Adapter, fa2: copies + FlashInfer's plan on the host, metadata inside the graph, replay.
    g2 = DecodeGraph(fa2, bs, table.shape[1], cache)
    g2.update(inp.seq_lens, table, inp.seq_lens_cpu)
    g2.capture()

    def fa2_step():
        g2.update(inp.seq_lens, table, inp.seq_lens_cpu)
        g2.graph.replay()
    res["graph_fa2_step_us"] = loop(fa2_step, steps)
    res["graph_fa2_host_us"] = host_only(fa2_step, steps)
    # FlashInfer's own CUDA-graph decode wrapper, host arrays prepared once (its best case).
    ws = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
    indptr = torch.arange(bs + 1, dtype=torch.int32) * table.shape[1]
    indices = table.reshape(-1).contiguous()
    last = torch.full((bs,), PAGE, dtype=torch.int32)
    bi, bx, bl = (torch.empty_like(indptr, device="cuda"), torch.empty_like(indices),
                  torch.empty_like(last, device="cuda"))
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=True, use_tensor_cores=True,
                                                      paged_kv_indptr_buffer=bi, paged_kv_indices_buffer=bx,
                                                      paged_kv_last_page_len_buffer=bl, backend="fa2")
    seq_cpu = inp.seq_lens_cpu

    def fi_plan():
        w.plan(indptr, indices, last, 32, 8, 128, PAGE, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
               o_data_type=torch.bfloat16, non_blocking=True, seq_lens=seq_cpu)
    fi_plan()
    o = torch.empty_like(q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        w.run(q, cache.kernel_view(), out=o)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w.run(q, cache.kernel_view(), out=o)

    def fi_step():
        fi_plan()
        graph.replay()
    res["graph_fi_step_us"] = loop(fi_step, steps)
    res["graph_fi_host_us"] = host_only(fi_step, steps)
    return res


def loop(fn, steps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e6


def host_only(fn, steps: int) -> float:
    """Median host time of one step's call (device work left running, no sync inside)."""
    return host_only_each([fn], steps)[0]


def host_only_each(fns, steps: int) -> list[float]:
    """``host_only`` of each of ``fns``, timed in turn call by call: a shared host drifts by more over a
    block of calls than the differences between the calls compared. The order runs through the n rotations and
    then the same reversed, so that each call takes each place equally often (on the H100 hosts the call timed
    right after another adapter's step ran 5-10 % faster than the same call timed first: bench/adapter_ab.py with
    the trees' order fixed per round, bench/logs/h100-2026-11-27w/README.md) and comes right after each other
    call equally often (with rotations alone, this tree timed against itself read 2-5 % apart:
    bench/logs/h100-2026-11-27y/README.md)."""
    import torch

    n = len(fns)
    ts = [[] for _ in fns]
    # with rotations alone a call comes after one of the others twice as often as after the other (three
    # arms: this tree after FlashInfer's plans, the base after this tree)
    orders = [[(j + k) % n for j in range(n)] for k in range(n)]
    orders += [o[::-1] for o in orders]
    for k in range(steps):
        for i in orders[k % len(orders)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fns[i]()
            ts[i].append(time.perf_counter() - t0)
    return [sorted(t)[len(t) // 2] * 1e6 for t in ts]


def print_table(rows) -> None:
    print("| batch | ctx | fa2 us | xqa us | xqa/fa2 | KV TB/s fa2 / xqa | plan_step fa2 / xqa us | metadata us | FI plan us "
          "| graph step us: adapter xqa / adapter fa2 / FlashInfer fa2 | host per step us: adapter xqa / adapter fa2 / FlashInfer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['ctx']} | {r['fa2_us']:.1f} | {r['xqa_us']:.1f} | {r['xqa_us'] / r['fa2_us']:.2f} "
              f"| {r['kv_tb_s_fa2']:.2f} / {r['kv_tb_s_xqa']:.2f} | {r['fa2_plan_step_us']:.0f} / {r['xqa_plan_step_us']:.0f} "
              f"| {r['metadata_us']:.0f} | {r['fi_plan_us']:.0f} | {r['graph_xqa_step_us']:.1f} / {r['graph_fa2_step_us']:.1f} / "
              f"{r['graph_fi_step_us']:.1f} | {r['graph_xqa_host_us']:.0f} / {r['graph_fa2_host_us']:.0f} / {r['graph_fi_host_us']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=("probe", "decode", "host-profile", "choice"), required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--contexts", default=",".join(map(str, CONTEXTS)))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.phase == "probe":
        phase_probe(out)
    elif a.phase == "host-profile":
        phase_host_profile(out)
    elif a.phase == "choice":
        phase_choice(out, tuple(int(x) for x in a.batches.split(",")), tuple(int(x) for x in a.contexts.split(",")))
    else:
        phase_decode(out, tuple(int(x) for x in a.batches.split(",")), tuple(int(x) for x in a.contexts.split(",")))


if __name__ == "__main__":
    main()

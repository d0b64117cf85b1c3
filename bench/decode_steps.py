"""Host time per step and CUDA-graph decode steps end to end, per decode backend (issue 17).

    python3 bench/decode_steps.py --out DIR [--backends fa2,fa3,xqa,mla-fa3,mla-fa2] [--quick]

Decode backends a plan can name on the H100 - fa2 (``paged_decode``), fa3 (``paged_prefill`` with
backend fa3, one query row per request: the rules' plan for ``attention_backend="fa3"``), XQA
(``xqa_decode``: vLLM 0.33's plan on 9.0) and MLA (``mla_paged_decode`` with the rules' backend here, and fa2) - over
Llama-3.1-8B attention (32/8 heads, head 128, bf16, page 16) and DeepSeek-V3 MLA (128 heads,
latent 512 + rope 64, page 64), batch 1-256 x context 1k-32k (MLA: batch 1-128 x 1k-16k).

Per shape (every request at the same context, block table exactly as wide as it needs):
- ``metadata``: host median of ``build_step`` for the decode-only step (the executor's layouts:
  copy lengths + table into the shape's buffers, replay its captured metadata graph, host arrays
  for FlashInfer's plan by numpy);
- ``plan_step``: host median of the executor's ``plan_step`` (metadata + FlashInfer's ``plan``);
- ``fi_plan``: host median of FlashInfer's ``plan`` alone, called with the very arguments
  ``plan_step`` gave it (recorded once), on the same wrapper; XQA plans nothing (0);
- graph step end to end: ``steps`` back-to-back decode steps, wall time / steps with one sync at the
  end (a step's host work overlaps the previous step's kernels, as in a serving loop), and the host
  time of one step (median, synchronized before each):
  adapter = ``DecodeGraph``: host copies lengths + table (+ FlashInfer's plan for wrappers), the
  graph holds metadata + K/V append + attention;
  FlashInfer = FlashInfer's own CUDA-graph wrapper over metadata an engine prepared beforehand
  (host: its ``plan`` on prepared host arrays, then replay of a graph holding the attention only;
  XQA: a graph of ``trtllm_batch_decode_with_kv_cache`` alone, host: replay only).
Host figures on the device machine's shared host move by up to 2x between runs; the JSON keeps
every row.

Prefill and mixed steps (general path, a new shape every step): metadata, plan_step and
FlashInfer's fa3 prefill plan; plus cProfile of a decode plan_step at batch 1 and 256 (fa2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
from xqa_vs_fa2 import host_only, loop as loop_us  # noqa: E402 - the decode benches' one set of timers

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
MLA = dict(num_qo_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
BATCHES = (1, 16, 64, 256)
CONTEXTS = (1024, 4096, 16384, 32768)
MLA_BATCHES = (1, 16, 64, 128)
MLA_CONTEXTS = (1024, 4096, 16384)


def host_median(fn, n=40):
    """Median host time of one call in µs (``xqa_vs_fa2.host_only``), after five warm calls."""
    for _ in range(5):
        fn()
    return host_only(fn, n)


def metadata(ex, inp):
    """The step metadata alone, as ``plan_step`` builds it (its pinned staging handed back)."""
    from attnplan.adapter.metadata import build_step

    step = build_step(ex.plan, inp, ex._staging, ex._layouts)
    ex._staging.release(step.extra.get("staging_slot", -1))
    return step


# Each decode backend's plan is the rules' own on the probed node (tests/gpu/gpu_common.py
# plan_or_raise, as the GPU tests build them; no hand-derived plan): fa2 is the kernel-truth plan
# here, fa3 decode is asked for by name, XQA is vLLM 0.33's decode on 9.0 (serving facts declared).
PLANS = {
    "fa2": (LLAMA, "flashinfer", lambda a: a.plan.decode.flashinfer_backend == "fa2", "fa2 decode"),
    "fa3": (dict(LLAMA, attention_backend="fa3"), "flashinfer", lambda a: a.plan.decode.flashinfer_backend == "fa3",
            "fa3 decode"),
    "xqa": (LLAMA, "vllm", lambda a: a.plan.decode.call == "xqa_decode", "XQA decode"),
    "mla-fa3": (MLA, "flashinfer", lambda a: a.plan.decode.call == "mla_paged_decode", "MLA decode (the rules' backend)"),
    "mla-fa2": (dict(MLA, attention_backend="fa2"), "flashinfer",
                lambda a: a.plan.decode.call == "mla_paged_decode" and a.plan.decode.flashinfer_backend == "fa2",
                "MLA decode on fa2"),
}


def executor_for(name):
    """An executor over the rules' plan for ``name`` (SystemExit naming why when they plan none)."""
    from gpu_common import NoRealPlan, executor_for as over, plan_or_raise

    try:
        return over(plan_or_raise(*PLANS[name]))
    except NoRealPlan as exc:
        raise SystemExit(f"decode_steps: {name}: {exc}") from None


def recorded_plan(wrapper, fn):
    """The (args, kwargs) FlashInfer's ``plan`` got from ``fn()`` on ``wrapper``."""
    seen = {}
    inner = wrapper.plan

    def spy(*a, **k):
        seen["call"] = (a, k)
        return inner(*a, **k)
    wrapper.plan = spy
    try:
        fn()
    finally:
        del wrapper.plan
    return seen["call"]


def fi_graph(ex, cache, step, q, mla_q=None):
    """FlashInfer's own CUDA-graph path for the plan's decode call over prepared metadata:
    (per-step host function, graph) - the wrapper's plan + replay, or replay alone for XQA."""
    import flashinfer
    import torch

    from attnplan.adapter.decode_layout import DecodeLayout

    backend, d, b = ex.backend, ex.plan.decode, step.decode
    call = backend.calls["decode"]
    out = torch.empty(b.num_tokens, ex.params.num_qo_heads,
                      ex.params.kv_lora_rank if mla_q else ex.params.head_dim_vo, dtype=torch.bfloat16, device="cuda")
    if not call.host_planned:            # XQA: device tensors only
        kw = call.kwargs(backend, step, q, cache, out)
        kw = {k: (v.clone() if isinstance(v, torch.Tensor) and k in ("block_tables", "seq_lens") else v)
              for k, v in kw.items()}

        def run():
            flashinfer.decode.trtllm_batch_decode_with_kv_cache(**kw)
        host = None
    else:
        # Buffers of FlashInfer's graph mode, filled by its plan from the engine's prepared arrays
        # (a layout here only allocates buffers of the right sizes; nothing computes into them).
        buf = DecodeLayout(b.num_reqs, d.q_len_per_req, ex.plan.kv_cache.page_size,
                           int(b.block_table.shape[1]), ex.device)
        w = backend.make_wrapper("decode", **call.graph_buffers(buf))
        prepared = b.kv_indices.clone()
        if call.runs == "latent":
            from flashinfer.mla import MLAPlanMetadata

            p = ex.params
            meta = MLAPlanMetadata.csr(b.qo_indptr_cpu.clone(), b.kv_page_indptr_cpu.clone(), prepared,
                                       b.seq_lens_cpu.clone())

            def host():
                w.plan(metadata=meta, num_heads=p.num_qo_heads, head_dim_ckv=p.kv_lora_rank,
                       head_dim_kpe=p.qk_rope_head_dim, page_size=ex.plan.kv_cache.page_size, causal=False,
                       sm_scale=p.sm_scale, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                       query_layout="split", kv_cache_layout="packed")

            def run():
                w.run(query=mla_q, kv_cache=cache.kernel_view(), out=out)
        else:
            from attnplan.adapter.step import PhaseBatch

            pb = PhaseBatch(**{**b.__dict__, "kv_indices": prepared,
                               **{k: getattr(b, k).clone() for k in ("qo_indptr_cpu", "kv_page_indptr_cpu",
                                                                     "last_page_len_cpu", "seq_lens_cpu")}})
            a, k = recorded_plan(w, lambda: backend.plan_wrapper(w, pb, "decode"))

            def host():
                w.plan(*a, **k)

            def run():
                call.run(backend, w, step, "decode", q, cache, out, k_scale=1.0, v_scale=1.0, sinks=None)
        host()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()

    def one_step():
        if host is not None:
            host()
        g.replay()
    return one_step


def decode_rows(name, out_dir, quick):
    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter.graphs import DecodeGraph
    from attnplan.adapter.metadata import build_step

    ex = executor_for(name)
    mla = ex.plan.kv_cache.mla
    page = ex.plan.kv_cache.page_size
    batches = (1, 64) if quick else (MLA_BATCHES if mla else BATCHES)
    contexts = (1024, 16384) if quick else (MLA_CONTEXTS if mla else CONTEXTS)
    num_pages = max(batches) * max(contexts) // page
    cache = ex.allocate_kv_cache(num_pages)
    cache.data.view(torch.bfloat16).normal_()            # random, finite (XQA reads page tails)
    p = ex.params
    perm = torch.randperm(num_pages, device="cuda", dtype=torch.int32)
    rows = []
    for bs in batches:
        for ctx in contexts:
            width = ctx // page
            table = perm[: bs * width].view(bs, width)
            seq_cpu = torch.full((bs,), ctx, dtype=torch.int32)
            inp = StepInput([ex.plan.decode.q_len_per_req] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
            row = dict(backend=name, call=ex.plan.decode.call, fi_backend=ex.plan.decode.flashinfer_backend,
                       batch=bs, ctx=ctx)
            # Persistent input tensors (an engine's buffers): after BIND_AFTER steps the layout
            # reads them in place; alternating between two sets keeps the copying layout.
            row["metadata_us"] = host_median(lambda: metadata(ex, inp))
            other = StepInput(inp.query_lens, inp.seq_lens.clone(), table.clone(), bs, seq_lens_cpu=seq_cpu.clone())
            flip = [inp, other]
            row["metadata_copying_us"] = host_median(lambda: metadata(ex, flip.reverse() or flip[0]))
            row["plan_step_us"] = host_median(lambda: ex.plan_step(inp))
            step = ex.plan_step(inp)
            w = ex.backend._decode
            if w is not None:
                a, k = recorded_plan(w, lambda: ex.backend.plan_step(step))
                row["fi_plan_us"] = host_median(lambda: w.plan(*a, **k))
            else:
                row["fi_plan_us"] = 0.0
            row["plan_step_minus_fi_plan_us"] = row["plan_step_us"] - row["fi_plan_us"]
            # Graph steps, adapter vs FlashInfer's own.
            g = DecodeGraph(ex, bs, width, cache)
            g.update(inp.seq_lens, table, seq_cpu)
            g.capture()

            def adapter_step():
                g.update(inp.seq_lens, table, seq_cpu)
                g.graph.replay()
            if mla:
                qn = torch.randn(bs, p.num_qo_heads, p.kv_lora_rank, device="cuda").bfloat16()
                qp = torch.randn(bs, p.num_qo_heads, p.qk_rope_head_dim, device="cuda").bfloat16()
                fi_step = fi_graph(ex, cache, step, None, mla_q=(qn, qp))
            else:
                q = torch.randn(bs * ex.plan.decode.q_len_per_req, p.num_qo_heads, p.head_dim_qk, device="cuda").bfloat16()
                fi_step = fi_graph(ex, cache, step, q)
            one = loop_us(adapter_step, 3)
            steps = max(20, min(300, int(300_000 / max(one, 1.0))))
            row["graph_steps"] = steps
            row["adapter_graph_step_us"] = loop_us(adapter_step, steps)
            row["fi_graph_step_us"] = loop_us(fi_step, steps)
            row["adapter_graph_host_us"] = host_median(adapter_step, 30)
            row["fi_graph_host_us"] = host_median(fi_step, 30)
            rows.append(row)
            print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            del g, fi_step
    (out_dir / f"decode-steps-{name}.json").write_text(json.dumps(rows, indent=1))
    return rows


def general_rows(out_dir):
    """Prefill-only and mixed steps: the general path (a new shape every step)."""
    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter.metadata import build_step

    ex = executor_for("fa2")
    page = ex.plan.kv_cache.page_size
    shapes = [("prefill", [], [1024]), ("prefill", [], [4096]), ("prefill", [], [16384]),
              ("prefill", [], [2048] * 8), ("mixed", [4096] * 64, [512] * 2), ("mixed", [4096] * 256, [1024] * 4)]
    rows = []
    for kind, dec_ctx, pre in shapes:
        q = [1] * len(dec_ctx) + pre
        seq = dec_ctx + pre
        width = max((s + page - 1) // page for s in seq)
        table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
        seq_cpu = torch.tensor(seq, dtype=torch.int32)
        inp = StepInput(q, seq_cpu.cuda(), table, len(dec_ctx), seq_lens_cpu=seq_cpu)
        row = dict(kind=kind, decodes=len(dec_ctx), prefill_tokens=sum(pre), prefills=len(pre))
        row["metadata_us"] = host_median(lambda: metadata(ex, inp))
        row["plan_step_us"] = host_median(lambda: ex.plan_step(inp))
        step = ex.plan_step(inp)
        fi = 0.0
        for phase, w in (("decode", ex.backend._decode), ("prefill", ex.backend._prefill)):
            if getattr(step, phase) is not None:
                a, k = recorded_plan(w, lambda: ex.backend.plan_wrapper(w, getattr(step, phase), phase))
                fi += host_median(lambda: w.plan(*a, **k))
        row["fi_plan_us"] = fi
        row["plan_step_minus_fi_plan_us"] = row["plan_step_us"] - fi
        rows.append(row)
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    (out_dir / "decode-steps-general.json").write_text(json.dumps(rows, indent=1))
    return rows


def breakdown(out_dir, n=200):
    """Host time of each part of a decode step (fa2 and XQA plans, batch 1 and 256 x 4k)."""
    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter.decode_layout import HostDecodeArrays, decode_step
    from attnplan.adapter.graphs import DecodeGraph
    from attnplan.adapter.metadata import build_step

    rows = []
    for name in ("fa2", "xqa"):
        ex = executor_for(name)
        page = ex.plan.kv_cache.page_size
        cache = ex.allocate_kv_cache(256 * 256)
        for bs in (1, 256):
            table = torch.randperm(bs * 256, device="cuda", dtype=torch.int32).view(bs, 256)
            seq_cpu = torch.full((bs,), 4096, dtype=torch.int32)
            inp = StepInput([1] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
            needs = ex.plan.metadata.decode_only
            for _ in range(5):
                ex.plan_step(inp)
            lay = ex._layouts.get(bs, 1, 256, inp.seq_lens, table)
            own = ex._layouts.get(bs, 1, 256)
            host = HostDecodeArrays(seq_cpu, 1, page, 256)
            step = ex.plan_step(inp)
            g = DecodeGraph(ex, bs, 256, cache)
            g.update(inp.seq_lens, table, seq_cpu)
            g.capture()
            parts = {
                "HostDecodeArrays (numpy)": lambda: HostDecodeArrays(seq_cpu, 1, page, 256),
                "layouts.get (bound)": lambda: ex._layouts.get(bs, 1, 256, inp.seq_lens, table),
                "copy lengths + table (own layout)": lambda: own.load(inp.seq_lens, table),
                "metadata graph replay": lay.run,
                "decode_step (bound)": lambda: decode_step(ex.plan, inp, needs, ex._layouts, host),
                "build_step": lambda: metadata(ex, inp),
                "backend.plan_step (our args + FlashInfer plan)": lambda: ex.backend.plan_step(step),
                "executor.plan_step": lambda: ex.plan_step(inp),
                "DecodeGraph.update (copies + plan)": lambda: g.update(inp.seq_lens, table, seq_cpu),
                "DecodeGraph replay": g.graph.replay,
                "torch: one empty int32 copy_ (reference op)": (lambda t=torch.empty(bs, dtype=torch.int32, device="cuda"):
                                                                t.copy_(inp.seq_lens, non_blocking=True)),
            }
            for part, fn in parts.items():
                us = host_median(fn, n)
                rows.append(dict(plan=name, batch=bs, part=part, us=us))
                print(f"{name} batch {bs}: {part}: {us:.1f} us", flush=True)
            del g
    (out_dir / "decode-steps-breakdown.json").write_text(json.dumps(rows, indent=1))


def profile(out_dir, n=300):
    import cProfile
    import io
    import pstats

    import torch

    from attnplan.adapter import StepInput

    ex = executor_for("fa2")
    text = []
    for bs in (1, 256):
        table = torch.randperm(bs * 256, device="cuda", dtype=torch.int32).view(bs, 256)
        seq_cpu = torch.full((bs,), 4096, dtype=torch.int32)
        inp = StepInput([1] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
        for _ in range(30):
            ex.plan_step(inp)
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(n):
            ex.plan_step(inp)
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(20)
        text.append(f"== fa2 decode plan_step batch {bs} ctx 4096 ({n} calls)\n{buf.getvalue()}")
        print(text[-1][:4000], flush=True)
    (out_dir / "decode-steps-profile.txt").write_text("\n".join(text))


def table(rows):
    lines = ["| backend | batch × ctx | metadata (persistent inputs / copied) | plan_step | FlashInfer plan | plan_step − plan | graph step: adapter / FlashInfer | host per graph step: adapter / FlashInfer |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['batch']} × {r['ctx'] // 1024}k | {r['metadata_us']:.0f} / {r['metadata_copying_us']:.0f} | {r['plan_step_us']:.0f} "
                     f"| {r['fi_plan_us']:.0f} | {r['plan_step_minus_fi_plan_us']:.0f} | {r['adapter_graph_step_us']:.1f} / "
                     f"{r['fi_graph_step_us']:.1f} | {r['adapter_graph_host_us']:.0f} / {r['fi_graph_host_us']:.0f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--backends", default="fa2,fa3,xqa,mla-auto,mla-fa2")
    ap.add_argument("--quick", action="store_true", help="two batches x two contexts per backend")
    ap.add_argument("--skip-general", action="store_true", help="decode rows only (no prefill/mixed rows, breakdown, profile)")
    ap.add_argument("--only-general", action="store_true", help="prefill/mixed rows, breakdown and profile only")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import flashinfer
    import torch

    rows = []
    for name in ([] if a.only_general else a.backends.split(",")):
        t0 = time.perf_counter()
        try:
            rows += decode_rows(name, out, a.quick)
        except Exception as exc:  # noqa: BLE001 - one backend's failure must not lose the others
            import traceback

            traceback.print_exc()
            print(f"[decode steps] {name} failed: {type(exc).__name__}: {exc}", flush=True)
        print(f"[decode steps] {name}: {time.perf_counter() - t0:.0f}s", flush=True)
        torch.cuda.empty_cache()
    md = table(rows)
    for part in (() if a.skip_general else (general_rows, breakdown, profile)):
        try:
            part(out)
        except Exception:  # noqa: BLE001 - keep what the other parts measured
            import traceback

            traceback.print_exc()
    (out / "decode-steps.md").write_text(md + "\n")
    (out / "decode-steps-meta.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(),
                                                                flashinfer=flashinfer.__version__,
                                                                torch=torch.__version__)))
    print(md)


if __name__ == "__main__":
    main()

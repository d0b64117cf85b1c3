"""Host time per step and CUDA-graph decode steps end to end, per decode backend (issues 17, 41).

    python3 bench/decode_steps.py --out DIR [--backends xqa,fa2,fa3,mla-fa3,mla-fa2] [--quick | --issue41]
        [--batches 1,4 --contexts 1024] [--parts decode,general,breakdown,profile]

``--issue41``: exactly issue 41's set - XQA, fa2 and both MLA decode paths at batch 1, 4, 16, 64
x context 1k and 4k, the prefill and mixed rows, the per-part breakdown of a steady step and a
cProfile; its modules are built first in one ninja (``warmup.prebuild``; ~2-4 min from an empty
FLASHINFER_WORKSPACE_BASE, seconds once built), the measurements take ~3-4 min on the H100.

Decode backends a plan can name on the H100 - fa2 (``paged_decode``), fa3 (``paged_prefill`` with
backend fa3, one query row per request: the rules' plan for ``attention_backend="fa3"``), XQA
(``xqa_decode``: vLLM 0.33's plan on 9.0) and MLA (``mla_paged_decode`` with the rules' backend here, and fa2) - over
Llama-3.1-8B attention (32/8 heads, head 128, bf16, page 16) and DeepSeek-V3 MLA (128 heads,
latent 512 + rope 64, page 64).

Per shape (every request at the same context, block table exactly as wide as it needs), a steady
step (the shape seen before: issue 41's cache per (batch, q_len, table width)):
- ``metadata``: host median of ``build_step`` for the decode-only step (persistent input tensors,
  read in place, and copied ones);
- ``plan_step``: host median of the executor's ``plan_step`` (metadata + the plan: a shape seen
  ``EagerPlans.AFTER`` times plans through its layout's own wrapper with FlashInfer's scheduler alone,
  eager_plans.py; ``eager_replay`` says whether it did); ``plan_step_whole``: the same with
  ``ATTNPLAN_EAGER_SCHEDULER_REPLAY=0`` (FlashInfer's whole ``plan`` every step, as before);
- ``fi_plan``: host median of FlashInfer's ``plan`` alone on the backend's own wrapper (the one a
  FlashInfer user plans each step), called with the very arguments the strategy gives it
  (recorded once); XQA plans nothing (0);
- graph step end to end: ``steps`` back-to-back decode steps, wall time / steps with one sync at the
  end (a step's host work overlaps the previous step's kernels, as in a serving loop; the best of
  two rounds, the variants interleaved), and the host time of one step (median, synchronized
  before each):
  adapter = ``DecodeGraph``: its ``update`` (FlashInfer's plan for wrappers, one copy each of the
  lengths and the table into its buffers) + replay of the graph holding metadata + K/V append +
  attention; ``adapter in place``: the same with the engine writing lengths and table straight
  into the graph's buffers (``update`` copies nothing), the way FlashInfer's own graph below reads
  its prepared buffers;
  FlashInfer = FlashInfer's own CUDA-graph wrapper over metadata an engine prepared beforehand
  (host: its ``plan`` on prepared host arrays, then replay of a graph holding the attention only;
  XQA: a graph of ``trtllm_batch_decode_with_kv_cache`` alone, host: replay only);
  ``FlashInfer + append``: the same graph with the K/V append at prepared slots in front (the
  device work every engine's step has; the adapter's graph differs from it by its metadata kernel);
  ``FlashInfer + its own append``: FlashInfer's whole step - its own append kernel
  (``flashinfer.page.append_paged_kv_cache``, MLA ``append_paged_mla_kv_cache``) over request
  indices / positions / paged metadata prepared once outside the graph, then its attention;
  ``adapter unfused, in place``: the adapter's graph built with ``ATTNPLAN_FUSED_APPEND=0`` (metadata
  launch, then ``kv_cache.append``'s two scatters: the graph before issue 41's fusion), in place.
  ``fused_append`` in each row says whether the adapter's graph wrote K/V from its metadata kernel.
Host figures on the device machine's shared host move by up to 2x between runs; the JSON keeps
every row.

Prefill and mixed steps (general path, a new shape every step): metadata, plan_step with each
wrapper's scheduler replay (general_plans.py; learned over the shapes first, as an engine's first
steps) and without it, FlashInfer's plans with the same arguments, metadata and plan_step of the
same steps carrying the engine's host block table (``block_table_cpu``), all timed in turn call by
call, and the eager step end to end (plan_step + append + forward against FlashInfer's plans + the
same append + its wrappers' runs); plus cProfile of a decode
plan_step and of ``DecodeGraph.update`` in place at batch 1 and 64 (fa2). The breakdown also
times, for host-planned calls, the candidates for the gap between FlashInfer's graph-mode plan
alone and ``DecodeGraph.update`` in place (``host_gap_parts``: refill + plan back to back, the plan
over pinned host arrays and without ``seq_lens``, one pageable / pinned H2D copy, update's checks;
the plan, update, refill and copies right after a replay was enqueued; update with gc off).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
from xqa_vs_fa2 import host_only, host_only_each, loop as loop_us  # noqa: E402 - the decode benches' one set of timers

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


def host_medians(fns, n=60):
    """``xqa_vs_fa2.host_only_each``: each of ``fns`` timed in turn, call by call, after five warm calls of each."""
    for fn in fns:
        for _ in range(5):
            fn()
    return host_only_each(fns, n)


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
    # fa2 asked for by name: the rules' own plan on the H100 runs XQA for small decode batches
    # (rules/decode_choice.yaml; bench/xqa_vs_fa2.py --phase choice times that choice).
    "fa2": (dict(LLAMA, attention_backend="fa2"), "flashinfer", lambda a: a.plan.decode.flashinfer_backend == "fa2",
            "fa2 decode"),
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
        ex = over(plan_or_raise(*PLANS[name]))
    except NoRealPlan as exc:
        raise SystemExit(f"decode_steps: {name}: {exc}") from None
    return ex


def swapped(obj, name, value, fn):
    """A callable that runs ``fn()`` with ``obj.name`` set to ``value`` and restored after: one arm of an
    in-process comparison timed in turn (the replay off, numpy for host_step.c, Python for host_torch.cpp)."""
    def run():
        old = getattr(obj, name)
        setattr(obj, name, value)
        try:
            return fn()
        finally:
            setattr(obj, name, old)
    return run


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


def fi_append_inputs(ex, step):
    """What FlashInfer's own append kernel reads, prepared once outside the graph as an engine
    prepares them (flashinfer/page.py ``append_paged_kv_cache``: each new token's request index
    and position - ``get_batch_indices_positions`` - and the paged KV indptr / indices / last-page
    lengths that already count the new tokens), from the step's device lengths and block table."""
    import torch

    b, page, qd = step.decode, ex.plan.kv_cache.page_size, ex.plan.decode.q_len_per_req
    seq = b.seq_lens.to(torch.int64)
    pages = (seq + page - 1) // page
    indptr = torch.zeros(b.num_reqs + 1, dtype=torch.int32, device=seq.device)
    indptr[1:] = torch.cumsum(pages, 0)
    last = (seq - (pages - 1) * page).int()
    table = b.block_table
    cols = torch.arange(table.shape[1], device=seq.device)
    indices = table[cols.view(1, -1) < pages.view(-1, 1)].int().contiguous()      # row-major: request order
    batch_indices = torch.arange(b.num_reqs, device=seq.device).repeat_interleave(qd).int()
    positions = (seq.view(-1, 1) - qd + torch.arange(qd, device=seq.device)).reshape(-1).int()
    return batch_indices, positions, indices, indptr, last


def fi_graph(ex, cache, step, q, mla_q=None, append=None, own_append=False):
    """FlashInfer's own CUDA-graph path for the plan's decode call over prepared metadata:
    the per-step host function (the wrapper's plan + replay, or replay alone for XQA).
    ``append``: the new K/V (MLA: latent rows) to append at the step's prepared slots inside the
    graph, before the attention: our ``kv_cache.append`` (two index_put scatters), or with
    ``own_append`` FlashInfer's own kernel (``flashinfer.page.append_paged_kv_cache``, MLA:
    ``append_paged_mla_kv_cache``) over ``fi_append_inputs`` - FlashInfer's whole step, its own
    append and its own attention."""
    import flashinfer
    import flashinfer.page  # noqa: F401 - its append kernels
    import torch

    from attnplan.adapter import kv_cache as kvc
    from attnplan.adapter.decode_layout import DecodeLayout

    backend, d, b = ex.backend, ex.plan.decode, step.decode
    call = backend.calls["decode"]
    out = torch.empty(b.num_tokens, ex.params.num_qo_heads,
                      ex.params.kv_lora_rank if mla_q else ex.params.head_dim_vo, dtype=torch.bfloat16, device="cuda")
    parts = (step.slot_pages.clone(), step.slot_offsets.clone())
    slots = step.slots.clone()
    fi_in = fi_append_inputs(ex, step) if own_append and append is not None else None
    if not call.host_planned:            # XQA: device tensors only
        kw = call.kwargs(backend, step, q, cache, out)
        kw = {k: (v.clone() if isinstance(v, torch.Tensor) and k in ("block_tables", "seq_lens") else v)
              for k, v in kw.items()}

        def attend():
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

            def attend():
                w.run(query=mla_q, kv_cache=cache.kernel_view(), out=out)
        else:
            from attnplan.adapter.step import PhaseBatch

            pb = PhaseBatch(**{**b.__dict__, "kv_indices": prepared,
                               **{k: getattr(b, k).clone() for k in ("qo_indptr_cpu", "kv_page_indptr_cpu",
                                                                     "last_page_len_cpu", "seq_lens_cpu")}})
            a, k = recorded_plan(w, lambda: backend.plan_wrapper(w, pb, "decode"))

            def host():
                w.plan(*a, **k)

            def attend():
                call.run(backend, w, step, "decode", q, cache, out, k_scale=1.0, v_scale=1.0, sinks=None)
        host()

    def run():
        if fi_in is not None:
            bi, pos, ind, ptr, last = fi_in
            if len(append) == 1:                     # MLA: latent = [ckv | kpe]
                rank = ex.params.kv_lora_rank
                flashinfer.page.append_paged_mla_kv_cache(append[0][:, :rank], append[0][:, rank:], bi, pos,
                                                          cache.ckv(), cache.kpe(), ind, ptr, last)
            else:
                flashinfer.page.append_paged_kv_cache(append[0], append[1], bi, pos, cache.kernel_view(), ind, ptr,
                                                      last, kv_layout=ex.plan.kv_cache.layout)
        elif append is not None:
            kvc.append(cache, slots, *append, pages_offsets=parts)
        attend()
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
    # The graph reads these tensors at their captured addresses: they live as long as the step.
    one_step.keep = (run, out, parts, slots, append, fi_in)
    return one_step


def best_loops(fns, steps, rounds=2):
    """Per function: the best of ``rounds`` loops of ``steps`` steps (µs per step), interleaved."""
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], loop_us(fn, steps))
    return best


def decode_rows(name, out_dir, batches, contexts):
    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter.graphs import DecodeGraph

    ex = executor_for(name)
    mla = ex.plan.kv_cache.mla
    page = ex.plan.kv_cache.page_size
    num_pages = max(batches) * max(contexts) // page
    cache = ex.allocate_kv_cache(num_pages)
    cache.data.view(torch.bfloat16).normal_()            # random, finite (XQA reads page tails)
    p = ex.params
    qd = ex.plan.decode.q_len_per_req
    perm = torch.randperm(num_pages, device="cuda", dtype=torch.int32)
    rows = []
    for bs in batches:
        for ctx in contexts:
            width = ctx // page
            table = perm[: bs * width].view(bs, width)
            seq_cpu = torch.full((bs,), ctx, dtype=torch.int32)
            inp = StepInput([qd] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
            row = dict(backend=name, call=ex.plan.decode.call, fi_backend=ex.plan.decode.flashinfer_backend,
                       batch=bs, ctx=ctx)
            # Persistent input tensors (an engine's buffers): after BIND_AFTER steps the layout
            # reads them in place; alternating between two other sets keeps the copying layout.
            row["metadata_us"] = host_median(lambda: metadata(ex, inp))
            # Two other sets of the same values, alternated: neither repeats, so neither is bound.
            flip = [StepInput(inp.query_lens, inp.seq_lens.clone(), table.clone(), bs, seq_lens_cpu=seq_cpu.clone())
                    for _ in range(2)]
            row["metadata_copying_us"] = host_median(lambda: metadata(ex, flip.reverse() or flip[0]))
            step = ex.plan_step(inp)
            w = ex.backend._decode
            if w is not None:
                # A repeated shape plans through its layout's own wrapper, with the scheduler alone once
                # checked (eager_plans.py); the same executor with that off beside it; and FlashInfer's
                # plan of the backend's own wrapper (as a FlashInfer user plans each step) with the
                # arguments the strategy gives it - the four timed in turn, call by call (host_medians):
                # a shared host drifts by more than the differences over a block of calls.
                a, k = recorded_plan(w, lambda: ex.backend.calls["decode"].plan(ex.backend, w, step.decode, "decode"))
                ex0 = with_env("ATTNPLAN_EAGER_SCHEDULER_REPLAY", lambda: executor_for(name))
                (row["plan_step_us"], row["plan_step_copying_us"], row["plan_step_whole_us"],
                 row["fi_plan_us"]) = host_medians([lambda: ex.plan_step(inp), lambda: ex.plan_step(flip.reverse() or flip[0]),
                                                    lambda: ex0.plan_step(inp), lambda: w.plan(*a, **k)])
                del ex0
            else:
                row["plan_step_us"], row["plan_step_copying_us"] = host_medians(
                    [lambda: ex.plan_step(inp), lambda: ex.plan_step(flip.reverse() or flip[0])])
                row["fi_plan_us"] = 0.0
                row["plan_step_whole_us"] = row["plan_step_us"]
            step = ex.plan_step(inp)
            row["eager_replay"] = step.extra.get("decode_wrapper") is not None
            row["eager_refused"] = "; ".join(sorted(set(ex.backend.eager.refused.values()))) or None
            row["plan_step_minus_fi_plan_us"] = row["plan_step_us"] - row["fi_plan_us"]
            row["plan_step_copying_minus_fi_plan_us"] = row["plan_step_copying_us"] - row["fi_plan_us"]
            row["plan_step_whole_minus_fi_plan_us"] = row["plan_step_whole_us"] - row["fi_plan_us"]
            # Graph steps, adapter vs FlashInfer's own.
            g = DecodeGraph(ex, bs, width, cache)
            g.update(inp.seq_lens, table, seq_cpu)
            g.capture()
            lay = g.layout
            lay.seq_lens.copy_(inp.seq_lens)
            lay.table.copy_(table)
            row["fused_append"] = getattr(g, "fused", None) is not None     # a tree before the fusion has none
            # The same graph with the metadata launch and kv_cache.append apart (the tree before
            # the fusion, in this process): ATTNPLAN_FUSED_APPEND=0 at construction.
            g0 = graph_with(ex, bs, width, cache, "ATTNPLAN_FUSED_APPEND")
            g0.update(inp.seq_lens, table, seq_cpu)
            g0.capture()
            g0.layout.seq_lens.copy_(inp.seq_lens)
            g0.layout.table.copy_(table)
            # And one whose planned steps run FlashInfer's whole plan, not its scheduler call alone
            # (the tree before plan_replay.py): ATTNPLAN_GRAPH_SCHEDULER_REPLAY=0. A call planned on
            # the device (XQA) has no host plan: the same graph serves.
            gw = g
            if getattr(g, "host_planned", False) and hasattr(g, "scheduler"):
                row["scheduler_replay"] = g.scheduler.ready
                row["scheduler_refused"] = g.scheduler.refused
                gw = graph_with(ex, bs, width, cache, "ATTNPLAN_GRAPH_SCHEDULER_REPLAY")
                gw.update(inp.seq_lens, table, seq_cpu)
                gw.capture()

            def adapter_step():
                g.update(inp.seq_lens, table, seq_cpu)
                g.graph.replay()

            def adapter_inplace():                 # the engine wrote into the graph's own buffers
                g.update(lay.seq_lens, lay.table, seq_cpu)
                g.graph.replay()

            def adapter_unfused_inplace():
                g0.update(g0.layout.seq_lens, g0.layout.table, seq_cpu)
                g0.graph.replay()

            # Decode as it runs: every request one token longer each step, from its own offset in
            # its page (``advance`` steps, cycled; lengths and table copied in as adapter_step does). The
            # rows above repeat one length set, whose page counts never change, so fa2's graph plans
            # once there (graphs.py _pages_only); here it plans on the steps where a request crosses
            # a page, as an engine's graph would.
            advance = 4 * page
            offs = torch.randint(0, page, (bs,), generator=torch.Generator().manual_seed(bs * 7919 + ctx))
            host_steps = [(ctx - advance - page + offs + i).int() for i in range(advance)]
            dev_steps = [h.cuda() for h in host_steps]

            def advancing(graph):
                at = [0]

                def step():
                    i = at[0] = (at[0] + 1) % advance
                    graph.update(dev_steps[i], table, host_steps[i])
                    graph.graph.replay()
                return step
            adapter_advancing, adapter_advancing_whole = advancing(g), advancing(gw)
            if mla:
                qn = torch.randn(bs * qd, p.num_qo_heads, p.kv_lora_rank, device="cuda").bfloat16()
                qp = torch.randn(bs * qd, p.num_qo_heads, p.qk_rope_head_dim, device="cuda").bfloat16()
                lat = torch.randn(bs * qd, p.kv_lora_rank + p.qk_rope_head_dim, device="cuda").bfloat16()
                fi_step = fi_graph(ex, cache, step, None, mla_q=(qn, qp))
                fi_append = fi_graph(ex, cache, step, None, mla_q=(qn, qp), append=(lat,))
                fi_own = fi_graph(ex, cache, step, None, mla_q=(qn, qp), append=(lat,), own_append=True)
            else:
                q = torch.randn(bs * qd, p.num_qo_heads, p.head_dim_qk, device="cuda").bfloat16()
                kn = torch.randn(bs * qd, p.num_kv_heads, p.head_dim_qk, device="cuda").bfloat16()
                vn = torch.randn(bs * qd, p.num_kv_heads, p.head_dim_vo, device="cuda").bfloat16()
                fi_step = fi_graph(ex, cache, step, q)
                fi_append = fi_graph(ex, cache, step, q, append=(kn, vn))
                fi_own = fi_graph(ex, cache, step, q, append=(kn, vn), own_append=True)
            skipped = getattr(g, "plans_skipped", 0)
            for _ in range(advance):
                adapter_advancing()
            row["advancing_plans_skipped"] = (getattr(g, "plans_skipped", 0) - skipped) / advance
            fns = {"adapter": adapter_step, "adapter_inplace": adapter_inplace, "adapter_advancing": adapter_advancing,
                   "adapter_advancing_whole": adapter_advancing_whole,
                   "adapter_unfused_inplace": adapter_unfused_inplace, "fi": fi_step, "fi_append": fi_append,
                   "fi_own_append": fi_own}
            if os.environ.get("DECODE_STEPS_CHECK"):      # name the variant a device fault comes from
                for k, fn in fns.items():
                    print(f"[check] {name} {bs} x {ctx}: {k}", flush=True)
                    fn()
                    torch.cuda.synchronize()
            one = loop_us(adapter_step, 3)
            steps = max(20, min(300, int(200_000 / max(one, 1.0))))
            row["graph_steps"] = steps
            best = best_loops(fns, steps)
            for k, fn in fns.items():
                row[f"{k}_graph_step_us"] = best[k]
                row[f"{k}_graph_host_us"] = host_median(fn, 30)
            row["ratio"] = best["adapter"] / best["fi"]
            row["ratio_inplace"] = best["adapter_inplace"] / best["fi"]
            row["ratio_vs_fi_append"] = best["adapter"] / best["fi_append"]
            row["ratio_inplace_vs_fi_append"] = best["adapter_inplace"] / best["fi_append"]
            # FlashInfer's whole step: its own append kernel, then its own graph's attention.
            row["ratio_vs_fi_own_append"] = best["adapter"] / best["fi_own_append"]
            row["ratio_inplace_vs_fi_own_append"] = best["adapter_inplace"] / best["fi_own_append"]
            row["ratio_unfused_inplace_vs_fi_own_append"] = best["adapter_unfused_inplace"] / best["fi_own_append"]
            row["ratio_advancing_vs_fi_own_append"] = best["adapter_advancing"] / best["fi_own_append"]
            row["ratio_advancing_whole_vs_fi_own_append"] = best["adapter_advancing_whole"] / best["fi_own_append"]
            rows.append(row)
            print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            del g, g0, gw, fi_step, fi_append, fi_own
    (out_dir / f"decode-steps-{name}.json").write_text(json.dumps(rows, indent=1))
    return rows


GENERAL_SHAPES = [("prefill", [], [1024]), ("prefill", [], [4096]), ("prefill", [], [2048] * 8),
                  ("mixed", [1024] * 16, [512] * 2), ("mixed", [4096] * 64, [512] * 2),
                  ("mixed", [4096] * 64, [1024] * 4)]


def general_rows(out_dir, shapes=GENERAL_SHAPES):
    """Prefill-only and mixed steps: the general path (a new shape every step), host and end to end."""
    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter import kv_cache as kvc

    from attnplan.adapter.general_plans import replay_of

    ex = executor_for("fa2")
    page = ex.plan.kv_cache.page_size
    p = ex.params
    inputs = []
    for kind, dec_ctx, pre in shapes:
        q = [1] * len(dec_ctx) + pre
        seq = dec_ctx + pre
        width = max((s + page - 1) // page for s in seq)
        table = torch.randperm(len(seq) * width, device="cuda", dtype=torch.int32).view(len(seq), width)
        seq_cpu = torch.tensor(seq, dtype=torch.int32)
        inputs.append(StepInput(q, seq_cpu.cuda(), table, len(dec_ctx), seq_lens_cpu=seq_cpu))
    # The same steps carrying the engine's host copy of the block table (vLLM keeps one): the host
    # gathers the slots and page indices too (host_metadata.py).
    hosted = [dataclasses.replace(inp, block_table_cpu=inp.block_table.cpu()) for inp in inputs]
    # An engine's first steps, every shape twice: each wrapper's scheduler replay learns and is checked
    # on them (general_plans.py), as in serving; the rows then time steps after it.
    for _ in range(2):
        for inp in inputs:
            ex.plan_step(inp)
    g = ex.backend.general

    def replay_off(inp):
        return swapped(g, "enabled", False, lambda: ex.plan_step(inp))()

    # the metadata's host arithmetic by numpy instead of host_step.c (host_native.py), timed in turn
    from attnplan.adapter import host_native

    lib = host_native.library()

    def numpy_path(fn):
        return swapped(host_native, "library", lambda: None, fn)
    # the step's device half by torch calls from Python instead of host_torch.cpp's one call, timed in turn
    views = ex._staging.views

    def python_views(fn):
        return swapped(ex._staging, "views", None, fn)
    rows = []
    for (kind, dec_ctx, pre), inp, inp_h in zip(shapes, inputs, hosted):
        seq = dec_ctx + pre
        width = int(inp.block_table.shape[1])
        cache = ex.allocate_kv_cache(len(seq) * width)
        cache.data.view(torch.bfloat16).normal_()
        row = dict(kind=kind, decodes=len(dec_ctx), prefill_tokens=sum(pre), prefills=len(pre))
        step = ex.plan_step(inp)
        fi, plans = 0.0, []
        for phase, w in (("decode", ex.backend._decode), ("prefill", ex.backend._prefill)):
            if getattr(step, phase) is not None and w is not None:
                a, k = recorded_plan(w, lambda: ex.backend.plan_wrapper(w, getattr(step, phase), phase))
                plans.append((w, a, k))
                r = replay_of(ex.backend, w)
                row[f"{phase}_replay"] = "none" if r is None else ("on" if r.ready else f"off: {r.refused}")

        def fi_plans():
            for w, a, k in plans:
                w.plan(*a, **k)
        # metadata, plan_step with the replay, without it, and FlashInfer's whole plans with the same
        # arguments: timed in turn, call by call (a shared host drifts more over a block of calls)
        (row["metadata_us"], row["plan_step_us"], row["plan_step_replay_off_us"], fi, row["metadata_host_table_us"],
         row["plan_step_host_table_us"], row["metadata_numpy_us"], row["plan_step_numpy_us"],
         row["plan_step_python_views_us"]) = host_medians(
            [lambda: metadata(ex, inp), lambda: ex.plan_step(inp), lambda: replay_off(inp), fi_plans,
             lambda: metadata(ex, inp_h), lambda: ex.plan_step(inp_h), numpy_path(lambda: metadata(ex, inp)),
             numpy_path(lambda: ex.plan_step(inp)), python_views(lambda: ex.plan_step(inp))])
        row["native"] = lib is not None
        row["native_views"] = views is not None
        row["plan_step_python_views_minus_fi_plan_us"] = row["plan_step_python_views_us"] - fi
        row["plan_step_numpy_minus_fi_plan_us"] = row["plan_step_numpy_us"] - fi
        row["plan_step_replay_off_minus_fi_plan_us"] = row["plan_step_replay_off_us"] - fi
        row["plan_step_host_table_minus_fi_plan_us"] = row["plan_step_host_table_us"] - fi
        row["fi_plan_us"] = fi
        row["plan_step_minus_fi_plan_us"] = row["plan_step_us"] - fi
        # End to end, eager: the adapter's step against FlashInfer's plans with the same arguments,
        # the same append at the same slots, and its wrappers' runs over the same metadata.
        t = step.num_tokens
        qt = torch.randn(t, p.num_qo_heads, p.head_dim_qk, device="cuda").bfloat16()
        kn = torch.randn(t, p.num_kv_heads, p.head_dim_qk, device="cuda").bfloat16()
        vn = torch.randn(t, p.num_kv_heads, p.head_dim_vo, device="cuda").bfloat16()
        out = torch.empty(t, p.num_qo_heads, p.head_dim_vo, device="cuda", dtype=torch.bfloat16)
        slots = step.slots.clone()

        def adapter_step():
            st = ex.plan_step(inp)
            ex.append_kv(st, cache, kn, vn)
            ex.forward(st, qt, cache, out)

        def fi_step():
            for w, a, k in plans:
                w.plan(*a, **k)
            kvc.append(cache, slots, kn, vn)
            for phase in ("decode", "prefill"):
                b = getattr(step, phase)
                if b is not None:
                    ex.backend.calls[phase].run(ex.backend, ex.backend._wrappers[phase], step, phase, qt[b.tok], cache,
                                                out[b.tok], k_scale=1.0, v_scale=1.0, sinks=None)
        one = loop_us(adapter_step, 2)
        steps = max(10, min(100, int(100_000 / max(one, 1.0))))
        best = best_loops({"adapter": adapter_step, "fi": fi_step}, steps)
        row["adapter_step_us"], row["fi_step_us"] = best["adapter"], best["fi"]
        row["ratio"] = best["adapter"] / best["fi"]
        rows.append(row)
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
        del cache
    (out_dir / "decode-steps-general.json").write_text(json.dumps(rows, indent=1))
    return rows


def breakdown(out_dir, n=200, batches=(1, 64), names=("fa2", "xqa", "mla-fa3")):
    """Host time of each part of a steady decode step (fa2, XQA and MLA plans, 4k context)."""
    import torch

    from attnplan.adapter import StepInput
    from attnplan.adapter.decode_layout import HostDecodeArrays, decode_step
    from attnplan.adapter.graphs import DecodeGraph

    rows = []
    for name in names:
        ex = executor_for(name)
        page = ex.plan.kv_cache.page_size
        w = 4096 // page                                    # 4k context: 256 pages of 16, 64 of 64 (MLA)
        cache = ex.allocate_kv_cache(max(batches) * w)
        for bs in batches:
            table = torch.randperm(bs * w, device="cuda", dtype=torch.int32).view(bs, w)
            seq_cpu = torch.full((bs,), 4096, dtype=torch.int32)
            inp = StepInput([1] * bs, seq_cpu.cuda(), table, bs, seq_lens_cpu=seq_cpu)
            needs = ex.plan.metadata.decode_only
            for _ in range(5):
                ex.plan_step(inp)
            own = ex._layouts.get(bs, 1, w)
            lay = ex._layouts.get(bs, 1, w, inp.seq_lens, table)
            host = HostDecodeArrays(bs, 1, page, w)
            step = ex.plan_step(inp)
            g = DecodeGraph(ex, bs, w, cache)
            g.update(inp.seq_lens, table, seq_cpu)
            g.capture()
            a, b = torch.empty_like(inp.seq_lens), torch.empty_like(table)
            parts = {
                "HostDecodeArrays.fill (numpy, in place)": lambda: host.fill(seq_cpu),
                "layouts.shape + pick (bound)": lambda: ex._layouts.pick(ex._layouts.shape(bs, 1, w), inp.seq_lens,
                                                                         table),
                "copy lengths + table (own layout)": lambda: own.load(inp.seq_lens, table),
                "_foreach_copy_ lengths + table": lambda: torch._foreach_copy_([a, b], [inp.seq_lens, table],
                                                                               non_blocking=True),
                "metadata graph replay": lay.run,
                "decode_step (bound)": lambda: decode_step(ex.plan, inp, needs, ex._layouts),
                "build_step": lambda: metadata(ex, inp),
                "backend.plan_step (our args + FlashInfer plan)": lambda: ex.backend.plan_step(step),
                "executor.plan_step": lambda: ex.plan_step(inp),
                # The lengths repeat here: the first two rows plan as a step whose page counts changed
                # (update_planned); the third is the repeated step, which fa2's graph does not plan.
                "DecodeGraph.update (plan + copies)": lambda: update_planned(g, seq_cpu, inp.seq_lens, table),
                "DecodeGraph.update, in place (plan only)": lambda: update_planned(g, seq_cpu),
                "DecodeGraph.update, in place, page counts repeated": lambda: g.update(g.layout.seq_lens,
                                                                                        g.layout.table, seq_cpu),
                "DecodeGraph replay": g.graph.replay,
                "torch: one int32 copy_ (reference op)": (lambda t=torch.empty(bs, dtype=torch.int32, device="cuda"):
                                                          t.copy_(inp.seq_lens, non_blocking=True)),
            }
            if g.wrapper is not None:
                planned = getattr(g, "_planned", None)         # the graph replays its first plan's arguments
                pa, pk = planned[1:] if planned else recorded_plan(
                    g.wrapper, lambda: g.update(g.layout.seq_lens, g.layout.table, seq_cpu))
                parts["FlashInfer graph-mode plan alone (same arguments)"] = lambda: g.wrapper.plan(*pa, **pk)
                parts.update(host_gap_parts(g, seq_cpu, pa, pk))
            for part, fn in parts.items():
                us = host_median(fn, n)
                rows.append(dict(plan=name, batch=bs, part=part, us=us))
                print(f"{name} batch {bs}: {part}: {us:.1f} us", flush=True)
            if g.wrapper is not None:
                # The same parts while the previous step's graph still runs (a serving loop's
                # case): a pageable H2D copy waits for the stream's earlier work before it stages.
                for part in ("FlashInfer graph-mode plan alone (same arguments)", "DecodeGraph.update, in place (plan only)",
                             "HostDecodeArrays.fill (numpy, in place)", "pageable H2D copy_, B + 1 int32 (plan's indptr copy)",
                             "pinned H2D copy_, B + 1 int32"):
                    us = after_replay(g, parts[part], n)
                    rows.append(dict(plan=name, batch=bs, part=part + ", right after a replay", us=us))
                    print(f"{name} batch {bs}: {part}, right after a replay: {us:.1f} us", flush=True)
                import gc

                gc.disable()
                try:
                    us = host_median(parts["DecodeGraph.update, in place (plan only)"], n)
                finally:
                    gc.enable()
                rows.append(dict(plan=name, batch=bs, part="DecodeGraph.update, in place, gc disabled", us=us))
                print(f"{name} batch {bs}: DecodeGraph.update, in place, gc disabled: {us:.1f} us", flush=True)
            del g
    (out_dir / "decode-steps-breakdown.json").write_text(json.dumps(rows, indent=1))


def host_gap_parts(g, seq_cpu, pa, pk):
    """Candidates for the gap between FlashInfer's graph-mode ``plan`` alone and ``DecodeGraph.update``
    in place (issue 41: 40.7 against 64 us with ~10 us of our own code, fa2 batch 1, H100), each
    timed on its own: the refill and the plan back to back (what ``update`` does, minus its checks);
    the plan over pinned copies of the host arrays (FlashInfer copies indptr and last-page lengths
    host to device: from pageable memory the driver stages them and syncs the stream first); one
    such copy alone, pageable and pinned; the plan with our arguments replaced by FlashInfer's own
    defaults where ours are extra (``seq_lens`` given: FlashInfer derives it otherwise)."""
    import torch

    host = g.host
    pinned = {id(t): t.pin_memory() for t in (*pa, *pk.values()) if isinstance(t, torch.Tensor) and t.device.type == "cpu"}
    pa_pinned = tuple(pinned.get(id(t), t) for t in pa)
    pk_pinned = {k: pinned.get(id(v), v) for k, v in pk.items()}
    dev = torch.empty(host.batch_size + 1, dtype=torch.int32, device="cuda")
    ptr_pinned = host.kv_indptr.pin_memory()
    pk_no_seq = {k: v for k, v in pk.items() if k != "seq_lens"}
    plan = g.wrapper.plan
    return {
        "fill + FlashInfer plan, back to back": lambda: (host.fill(seq_cpu), plan(*pa, **pk)),
        "FlashInfer plan, pinned host arrays": lambda: plan(*pa_pinned, **pk_pinned),
        "FlashInfer plan without seq_lens (FlashInfer derives them)": lambda: plan(*pa, **pk_no_seq),
        "pageable H2D copy_, B + 1 int32 (plan's indptr copy)": lambda: dev.copy_(host.kv_indptr, non_blocking=True),
        "pinned H2D copy_, B + 1 int32": lambda: dev.copy_(ptr_pinned, non_blocking=True),
        "update's checks alone (shape, data_ptr x2)": lambda: (g.layout.table.shape[0] != g.batch_size,
                                                              g.layout.seq_lens.data_ptr() != g.layout.seq_lens.data_ptr(),
                                                              g.layout.table.data_ptr() != g.layout.table.data_ptr()),
    }


def with_env(var, make):
    """``make()`` with ``var=0`` in the environment (a switch read at construction), restored after."""
    old = os.environ.get(var)
    os.environ[var] = "0"
    try:
        return make()
    finally:
        if old is None:
            del os.environ[var]
        else:
            os.environ[var] = old


def graph_with(ex, bs, width, cache, var):
    """A ``DecodeGraph`` built with ``var=0`` (ATTNPLAN_FUSED_APPEND, ATTNPLAN_GRAPH_SCHEDULER_REPLAY)."""
    from attnplan.adapter.graphs import DecodeGraph

    return with_env(var, lambda: DecodeGraph(ex, bs, width, cache))


def update_planned(g, seq_cpu, seq_lens=None, table=None):
    """``DecodeGraph.update`` as on a step that plans: fa2's graph skips FlashInfer's ``plan`` while the
    page counts repeat (host_plan.py ``HostPlan.plan``), and these rows repeat one length set, so the last
    planned page counts are forgotten first. ``seq_lens`` / ``table`` None: the graph's own buffers."""
    if g.host_planned:
        g.planner._planned_pages = None
    g.update(g.layout.seq_lens if seq_lens is None else seq_lens, g.layout.table if table is None else table, seq_cpu)


def after_replay(g, fn, n):
    """Median host time of ``fn`` called right after the graph's replay was enqueued (synchronized
    before each replay): what a step's host work costs while the previous step still runs."""
    import torch

    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        g.graph.replay()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def profile(out_dir, n=300, batches=(1, 64), names=("fa2", "mla-fa3")):
    import cProfile
    import io
    import pstats

    import torch

    from attnplan.adapter import StepInput

    text = []
    executors = {name: executor_for(name) for name in names}   # one per plan, as the breakdown keeps
    for name, bs in ((nm, b) for nm in names for b in batches):
        ex = executors[name]
        w = 4096 // ex.plan.kv_cache.page_size
        table = torch.randperm(bs * w, device="cuda", dtype=torch.int32).view(bs, w)
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
        text.append(f"== {name} decode plan_step batch {bs} ctx 4096 ({n} calls)\n{buf.getvalue()}")
        print(text[-1][:4000], flush=True)
        # DecodeGraph.update in place: where its host time goes beside FlashInfer's plan (issue 41).
        from attnplan.adapter.graphs import DecodeGraph

        g = DecodeGraph(ex, bs, w, ex.allocate_kv_cache(bs * w))
        g.update(inp.seq_lens, table, seq_cpu)
        for _ in range(30):
            update_planned(g, seq_cpu)
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(n):
            update_planned(g, seq_cpu)
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(25)
        text.append(f"== {name} DecodeGraph.update in place batch {bs} ctx 4096 ({n} calls)\n{buf.getvalue()}")
        print(text[-1][:4000], flush=True)
        del g
    (out_dir / "decode-steps-profile.txt").write_text("\n".join(text))


def table(rows):
    lines = ["| backend | batch × ctx | plan_step − FlashInfer plan: persistent / copied inputs (plan) [eager scheduler replay; off: persistent] | graph step µs: adapter / in place / FlashInfer / FlashInfer + append | adapter ÷ FlashInfer (in place) | adapter ÷ FlashInfer + append (in place) | host per graph step µs: adapter / in place / FlashInfer | graph step µs: FlashInfer + its own append / in place, unfused | in place ÷ FlashInfer + own append: fused / unfused (adapter ÷) | lengths +1 a step: adapter graph step µs / ÷ FlashInfer + own append (plans skipped) | the same, FlashInfer's whole plan on planned steps: ÷ FlashInfer + own append (scheduler replay) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['batch']} × {r['ctx'] // 1024}k | {r['plan_step_minus_fi_plan_us']:.0f} / "
                     f"{r['plan_step_copying_minus_fi_plan_us']:.0f} ({r['fi_plan_us']:.0f}) [{_eager_word(r)}; "
                     f"{r.get('plan_step_whole_minus_fi_plan_us', float('nan')):.0f}] | "
                     f"{r['adapter_graph_step_us']:.1f} / {r['adapter_inplace_graph_step_us']:.1f} / "
                     f"{r['fi_graph_step_us']:.1f} / {r['fi_append_graph_step_us']:.1f} | {r['ratio']:.2f} "
                     f"({r['ratio_inplace']:.2f}) | {r['ratio_vs_fi_append']:.2f} ({r['ratio_inplace_vs_fi_append']:.2f}) | "
                     f"{r['adapter_graph_host_us']:.0f} / {r['adapter_inplace_graph_host_us']:.0f} / "
                     f"{r['fi_graph_host_us']:.0f} | {r['fi_own_append_graph_step_us']:.1f} / "
                     f"{r['adapter_unfused_inplace_graph_step_us']:.1f} | {r['ratio_inplace_vs_fi_own_append']:.2f}"
                     f"{'' if r.get('fused_append') else ' (not fused)'} / {r['ratio_unfused_inplace_vs_fi_own_append']:.2f} "
                     f"({r['ratio_vs_fi_own_append']:.2f}) | {r['adapter_advancing_graph_step_us']:.1f} / "
                     f"{r['ratio_advancing_vs_fi_own_append']:.2f} ({100 * r['advancing_plans_skipped']:.0f} %) | "
                     f"{r.get('ratio_advancing_whole_vs_fi_own_append', float('nan')):.2f} "
                     f"({_replay_word(r)}) |")
    return "\n".join(lines)


def _eager_word(r):
    if not r.get("fi_plan_us"):
        return "nothing planned on the host"
    return "on" if r.get("eager_replay") else f"off: {r.get('eager_refused')}"


def _replay_word(r):
    if "scheduler_replay" not in r:
        return "nothing planned on the host"
    return "on" if r["scheduler_replay"] else f"off: {r.get('scheduler_refused')}"


def general_table(rows):
    lines = ["| step | replay | metadata | plan_step | FlashInfer plans | plan_step − plans | the same, replay off "
             "| with the host block table: metadata / plan_step − plans "
             "| numpy, not host_step.c: metadata / plan_step − plans "
             "| torch from Python, not host_torch.cpp: plan_step − plans "
             "| eager step end to end µs: adapter / FlashInfer (ratio) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        what = (f"{r['kind']}: {r['decodes']} decodes + {r['prefills']} prefills ({r['prefill_tokens']} tokens)")
        replay = ", ".join(f"{ph} {r[ph + '_replay']}" for ph in ("decode", "prefill") if ph + "_replay" in r)
        lines.append(f"| {what} | {replay} | {r['metadata_us']:.0f} | {r['plan_step_us']:.0f} | {r['fi_plan_us']:.0f} | "
                     f"{r['plan_step_minus_fi_plan_us']:.0f} | {r['plan_step_replay_off_minus_fi_plan_us']:.0f} | "
                     f"{r['metadata_host_table_us']:.0f} / {r['plan_step_host_table_minus_fi_plan_us']:.0f} | "
                     f"{r['metadata_numpy_us']:.0f} / {r['plan_step_numpy_minus_fi_plan_us']:.0f} | "
                     f"{r.get('plan_step_python_views_minus_fi_plan_us', float('nan')):.0f} | "
                     f"{r['adapter_step_us']:.1f} / {r['fi_step_us']:.1f} ({r['ratio']:.2f}) |")
    return "\n".join(lines)


def prebuild_for(names, general, breakdown=True):
    """Every module the measured plans load, in one ninja (warm-up's prebuild); ``general``: also
    what the prefill/mixed rows (fa2's plan, both phases) and, with ``breakdown``, the breakdown and
    profile (fa2, XQA, fa3-MLA) load."""
    from gpu_common import plan_or_raise

    from attnplan.adapter.warmup import plan_modules, prebuild

    mods = {}
    extra = (("fa2", "xqa", "mla-fa3") if breakdown else ("fa2",)) if general else ()
    for name in dict.fromkeys([*names, *extra]):
        plan = plan_or_raise(*PLANS[name]).plan
        mods.update({m.name: m for m in plan_modules(plan) if (general and name == "fa2") or m.phase == "decode"})
    t0 = time.perf_counter()
    prebuild(list(mods.values()))
    print(f"[decode steps] prebuilt {len(mods)} modules in {time.perf_counter() - t0:.0f}s: {sorted(mods)}", flush=True)
    if names:
        # FlashInfer's append kernels (the "FlashInfer + its own append" graph): one more module.
        import flashinfer.page

        t0 = time.perf_counter()
        flashinfer.page.get_page_module()
        print(f"[decode steps] FlashInfer's page module loaded in {time.perf_counter() - t0:.0f}s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--backends", default=None, help="default: xqa,fa2,fa3,mla-fa3,mla-fa2 (--issue41: xqa,fa2,mla-fa3,mla-fa2)")
    ap.add_argument("--quick", action="store_true", help="two batches x two contexts per backend")
    ap.add_argument("--issue41", action="store_true",
                    help="issue 41's set: batch 1/4/16/64 x context 1k/4k per backend, the prefill/mixed rows, "
                         "the breakdown and the profile; its modules built first")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes (overrides the preset)")
    ap.add_argument("--contexts", default=None, help="comma-separated contexts (overrides the preset)")
    ap.add_argument("--parts", default="decode,general,breakdown,profile",
                    help="which parts to run, in this order (comma-separated)")
    ap.add_argument("--skip-general", action="store_true", help="decode rows only (same as --parts decode)")
    ap.add_argument("--only-general", action="store_true", help="same as --parts general,breakdown,profile")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import flashinfer
    import torch

    parts = a.parts.split(",")
    if a.skip_general:
        parts = ["decode"]
    if a.only_general:
        parts = ["general", "breakdown", "profile"]
    names = (a.backends or ("xqa,fa2,mla-fa3,mla-fa2" if a.issue41 else "xqa,fa2,fa3,mla-fa3,mla-fa2")).split(",")
    if "decode" not in parts:
        names = []
    if a.issue41:
        prebuild_for(names, bool({"general", "breakdown", "profile"} & set(parts)),
                     bool({"breakdown", "profile"} & set(parts)))
    rows = []
    for name in names:
        t0 = time.perf_counter()
        mla = "kv_lora_rank" in PLANS[name][0]
        if a.issue41:
            batches, contexts = (1, 4, 16, 64), (1024, 4096)
        elif a.quick:
            batches, contexts = (1, 64), (1024, 16384)
        else:
            batches, contexts = (MLA_BATCHES, MLA_CONTEXTS) if mla else (BATCHES, CONTEXTS)
        if a.batches:
            batches = tuple(int(x) for x in a.batches.split(","))
        if a.contexts:
            contexts = tuple(int(x) for x in a.contexts.split(","))
        try:
            rows += decode_rows(name, out, batches, contexts)
        except Exception as exc:  # noqa: BLE001 - one backend's failure must not lose the others
            import traceback

            traceback.print_exc()
            print(f"[decode steps] {name} failed: {type(exc).__name__}: {exc}", flush=True)
        print(f"[decode steps] {name}: {time.perf_counter() - t0:.0f}s", flush=True)
        torch.cuda.empty_cache()
    md = table(rows) if rows else ""
    if md:
        print(md, flush=True)
    funcs = {"general": general_rows, "breakdown": breakdown, "profile": profile}
    for part in parts:
        if part not in funcs:
            continue
        t0 = time.perf_counter()
        try:
            r = funcs[part](out)
            if part == "general" and r:
                gmd = general_table(r)
                md = (md + "\n\n" + gmd) if md else gmd
                print(gmd, flush=True)
        except Exception:  # noqa: BLE001 - keep what the other parts measured
            import traceback

            traceback.print_exc()
        print(f"[decode steps] {part}: {time.perf_counter() - t0:.0f}s", flush=True)
    (out / "decode-steps.md").write_text(md + "\n")
    (out / "decode-steps-meta.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(),
                                                                flashinfer=flashinfer.__version__,
                                                                torch=torch.__version__)))


if __name__ == "__main__":
    main()

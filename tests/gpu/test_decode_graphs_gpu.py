"""Issue 17 on the H100: decode steps whose whole device work - metadata, append, attention - is
one CUDA graph per batch size, for every decode call a plan can name here (fa2 paged decode, fa2
spec-decode on the prefill kernel, fa3, XQA, the sink wrapper, MLA fa2/fa3), against the float32
reference over two consecutive steps with new lengths; and eager decode-only steps through their
shape's captured layout, with no device-to-host sync in either."""

from __future__ import annotations

import contextlib
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, answer, Batch, executor_for, no_device_sync, random_lens, real_plan, rel_err  # noqa: E402

from attnplan.adapter import AttentionExecutor, attention_ref  # noqa: E402
from attnplan.adapter import kv_cache as kvc  # noqa: E402
from attnplan.adapter.graphs import DecodeGraph  # noqa: E402
from attnplan.adapter.warmup import plan_modules, prebuild  # noqa: E402

pytestmark = pytest.mark.gpu

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
GPT_OSS = dict(head_dim=64, num_qo_heads=64, num_kv_heads=8, sliding_window=128)
MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

PLANS = {
    "fa2": lambda: answer(**LLAMA),
    "fa2-spec-q3": lambda: answer(**LLAMA, num_speculative_tokens=2),
    "fa3": lambda: real_plan(dict(LLAMA, attention_backend="fa3"), "flashinfer",
                             lambda a: a.plan.decode.flashinfer_backend == "fa3", "fa3 decode"),
    "xqa": lambda: real_plan(LLAMA, "vllm", lambda a: a.plan.decode.call == "xqa_decode", "XQA decode"),
    "xqa-q3": lambda: real_plan(dict(LLAMA, num_speculative_tokens=2), "vllm",
                                lambda a: a.plan.decode.call == "xqa_decode", "XQA speculative decode (q_len 3)"),
    "sink-fa2": lambda: real_plan(dict(GPT_OSS, sinks=True), "flashinfer",
                                  lambda a: a.plan.decode.call == "sink", "the sink wrapper in decode"),
}
MLA_PLANS = {"mla-auto": lambda: answer(**MLA), "mla-fa2": lambda: answer(**MLA, attention_backend="fa2")}


@pytest.fixture(scope="module", autouse=True)
def built():
    t0 = time.perf_counter()
    # Decode kernels only: these tests run no prefill (history is written by appends).
    mods = {m.name: m for make in (*PLANS.values(), *MLA_PLANS.values()) for m in plan_modules(make().plan)
            if m.phase == "decode"}
    prebuild(list(mods.values()))
    print(f"[decode graphs] prebuilt {len(mods)} modules in {time.perf_counter() - t0:.1f}s")


def ex_for(name: str) -> AttentionExecutor:
    a = PLANS[name]()
    return executor_for(a)


@pytest.mark.parametrize("name", list(PLANS))
def test_graph_step_holds_metadata_append_and_attention(name):
    ex = ex_for(name)
    qd, bs = ex.plan.decode.q_len_per_req, 8
    poison = "finite" if ex.plan.decode.call == "xqa_decode" else "nan"
    first = Batch(ex, [qd] * bs, random_lens(bs - 1, qd, 1500) + [1500], bs, poison=poison)
    g = DecodeGraph(ex, bs, first.table.shape[1], first.cache, sinks=first.sinks)
    g.update(first.input.seq_lens, first.table, first.input.seq_lens_cpu)
    g.capture()
    errs = [rel_err(g.replay(first.q, *first.new_kv()).clone(), first.reference())]
    # The next steps: new lengths (shorter and longer), the same batch size, pages and cache.
    for _ in range(2):
        nxt = Batch(ex, [qd] * bs, random_lens(bs, qd, 1500), bs, reuse=first, poison=poison)
        nxt.sinks = first.sinks             # model weights: the graph captured the first step's
        g.update(nxt.input.seq_lens, nxt.table, nxt.input.seq_lens_cpu)
        errs.append(rel_err(g.replay(nxt.q, *nxt.new_kv()).clone(), nxt.reference()))
    sched = f", scheduler replay: {g.scheduler.replays} (refused: {g.scheduler.refused})" if g.host_planned else ""
    print(f"graph step {name} ({ex.plan.decode.call}, {ex.plan.decode.flashinfer_backend}, q_len {qd}): "
          f"rel errs {[f'{e:.2e}' for e in errs]}{sched}")
    assert max(errs) <= TOL


@pytest.mark.parametrize("name", ["fa2", "fa3"])
def test_fa2_graph_steps_that_skip_the_plan_stay_exact(name):
    """Issue 41: fa2's graph step plans only when a request's page count changes (graphs.py
    ``_pages_only``), and a step that plans calls FlashInfer's scheduler alone (plan_replay.py,
    learned and checked at the first update); fa3 plans every step, the same way. Every request
    one token longer each step, the table rewritten each step: every step equals the reference."""
    ex = ex_for(name)
    bs, steps = 4, 24
    # Long enough that fa2's schedule follows the page counts (below 8 pages a request, 128 tokens /
    # page 16, FlashInfer's fa2 scheduler splits nothing: every page-count set has one schedule and
    # the scheduler check cannot tell, so the graph keeps the whole plan - seen on the H100).
    start = [150, 300, 17, 470]
    first = Batch(ex, [1] * bs, [s + steps for s in start], bs)
    g = DecodeGraph(ex, bs, first.table.shape[1], first.cache)
    assert g.planner.pages_only == (name == "fa2")
    g.update(first.input.seq_lens, first.table, first.input.seq_lens_cpu)
    g.capture()
    errs = []
    for i in range(steps):
        nxt = Batch(ex, [1] * bs, [s + i for s in start], bs, reuse=first)
        g.update(nxt.input.seq_lens, nxt.table, nxt.input.seq_lens_cpu)
        errs.append(rel_err(g.replay(nxt.q, *nxt.new_kv()).clone(), nxt.reference()))
    print(f"{name} graph, lengths +1 a step: {g.plans_skipped} of {steps} plans skipped, scheduler replays "
          f"{g.scheduler.replays} (refused: {g.scheduler.refused}), worst rel err {max(errs):.2e}")
    assert max(errs) <= TOL
    assert g.scheduler.ready, g.scheduler.refused
    if name == "fa2":
        assert g.plans_skipped >= steps // 2
    else:
        assert g.scheduler.replays == steps


def mla_step(ex, table, cache, lat, seq, gen):
    """This step's MLA decode inputs over a history the cache holds up to seq - 1."""
    page = ex.plan.kv_cache.page_size
    for r, s in enumerate(seq):
        pos = torch.arange(s - 1, device="cuda")
        kvc.append(cache, table[r, pos // page].long() * page + pos % page, lat[r][: s - 1])
    bs = len(seq)
    q_nope = torch.randn(bs, 16, 512, device="cuda", generator=gen).bfloat16()
    q_pe = torch.randn(bs, 16, 64, device="cuda", generator=gen).bfloat16()
    latent = torch.cat([x[s - 1:s] for x, s in zip(lat, seq)])
    q = torch.cat([q_nope, q_pe], -1)
    ref = torch.cat([attention_ref(q[r:r + 1], lat[r][:s].unsqueeze(1), lat[r][:s, :512].unsqueeze(1),
                                   sm_scale=ex.params.sm_scale)[0] for r, s in enumerate(seq)])
    return q_nope, q_pe, latent, ref


def mla_batch(ex, seed, bs=8, longest=3000):
    """(generator, batch size, longest, table width, a random block table, a NaN-filled cache, each request's
    latent rows) for MLA decode steps over up to ``longest`` tokens a request."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    page = ex.plan.kv_cache.page_size
    width = (longest + page - 1) // page
    table = torch.randperm(bs * width, device="cuda", generator=gen).view(bs, width).int()
    cache = ex.allocate_kv_cache(bs * width)
    cache.data.fill_(float("nan"))
    lat = [torch.randn(longest, 576, device="cuda", generator=gen).bfloat16() for _ in range(bs)]
    return gen, bs, longest, width, table, cache, lat


@pytest.mark.parametrize("name", list(MLA_PLANS))
def test_mla_graph_step(name):
    ex = AttentionExecutor(MLA_PLANS[name](), device="cuda")
    gen, bs, longest, width, table, cache, lat = mla_batch(ex, 11)
    g = DecodeGraph(ex, bs, width, cache)
    errs = []
    for i in range(5):
        seq = random_lens(bs - 1, 1, longest) + [longest if i == 0 else 1]
        q_nope, q_pe, latent, ref = mla_step(ex, table, cache, lat, seq, gen)
        seq_t = torch.tensor(seq, dtype=torch.int32)
        g.update(seq_t.cuda(), table, seq_t)
        if i == 0:
            g.capture()
        errs.append(rel_err(g.replay_mla(q_nope, q_pe, latent).clone(), ref))
    print(f"MLA graph step {name} ({ex.plan.decode.flashinfer_backend}): rel errs {[f'{e:.2e}' for e in errs]}, "
          f"scheduler replays {g.scheduler.replays} (refused: {g.scheduler.refused})")
    assert max(errs) <= TOL
    # Issue 41: MLA's steps call FlashInfer's scheduler alone (plan_replay.py), checked at the first.
    assert g.scheduler.ready and g.scheduler.replays == 4, g.scheduler.refused


@pytest.mark.parametrize("name", ["fa2", "xqa", "fa3"])
def test_graph_update_and_replay_do_no_device_to_host_sync(name):
    ex = ex_for(name)
    bs = 4
    poison = "finite" if name == "xqa" else "nan"
    b = Batch(ex, [1] * bs, random_lens(bs, 1, 900), bs, poison=poison)
    g = DecodeGraph(ex, bs, b.table.shape[1], b.cache)
    g.update(b.input.seq_lens, b.table, b.input.seq_lens_cpu)
    g.capture()
    ref = b.reference()
    k, v = b.new_kv()
    with no_device_sync():
        g.update(b.input.seq_lens, b.table, b.input.seq_lens_cpu)
        out = g.replay(b.q, k, v)
    assert rel_err(out, ref) <= TOL


@pytest.mark.parametrize("name", ["fa2", "fa2-spec-q3", "fa3"])
def test_eager_decode_through_layouts_without_sync(name):
    """Eager decode-only steps replay their shape's captured metadata: the first step of a shape
    captures it (outside the check), the next ones neither sync nor rebuild."""
    ex = ex_for(name)
    qd, bs = ex.plan.decode.q_len_per_req, 6
    b = Batch(ex, [qd] * bs, random_lens(bs - 1, qd, 2000) + [2000], bs)   # width for the next step
    ref = b.reference()
    assert rel_err(b.run(), ref) <= TOL
    layouts = len(ex._layouts)
    k, v = b.new_kv()
    out = torch.empty(bs * qd, ex.params.num_qo_heads, ex.params.head_dim_vo, dtype=torch.bfloat16, device="cuda")
    with no_device_sync():
        step = ex.plan_step(b.input)
        ex.append_kv(step, b.cache, k, v)
        ex.forward(step, b.q, b.cache, out)
    assert "layout" in step.extra and len(ex._layouts) == layouts
    assert rel_err(out, ref) <= TOL
    # A new step of the same shape, other lengths: the same layout, right answers.
    nxt = Batch(ex, [qd] * bs, random_lens(bs, qd, 2000), bs, reuse=b)
    assert rel_err(nxt.run(), nxt.reference()) <= TOL and len(ex._layouts) == layouts


@pytest.mark.parametrize("name", ["fa2", "fa2-spec-q3", "fa3", "sink-fa2"])
def test_eager_steps_of_a_repeated_shape_call_the_scheduler_alone(name):
    """Issue 41: a decode shape's AFTER-th eager step gets a wrapper of its own over the layout's
    buffers and checks FlashInfer's scheduler call alone (one device sync, outside the sync check);
    every step after plans with that call alone, no sync, exact (eager_plans.py). fa2 by name: the
    rules' own plan runs XQA at these batches (rules/decode_choice.yaml). The sink wrapper over GPT-OSS
    heads may give one schedule for every page-count set the check tries (seen on the H100 at batch
    6): then the check refuses, and the steps stay on the backend's wrapper - exact either way."""
    from attnplan.adapter.eager_plans import EagerPlans

    ex = executor_for(answer(**LLAMA, attention_backend="fa2")) if name == "fa2" else ex_for(name)
    qd, bs, steps = ex.plan.decode.q_len_per_req, 8, 8
    first = Batch(ex, [qd] * bs, random_lens(bs - 1, qd, 1500) + [1500], bs)
    errs, ran, keep = [rel_err(first.run(), first.reference())], [], []
    for i in range(steps):
        # new input tensors each step, all kept: the copying layout throughout (no binding)
        b = Batch(ex, [qd] * bs, random_lens(bs, qd, 1500), bs, reuse=first)
        keep.append(b)
        b.sinks = first.sinks
        k, v = b.new_kv()
        out = torch.full((bs * qd, ex.params.num_qo_heads, ex.params.head_dim_vo), float("nan"), dtype=torch.bfloat16,
                         device="cuda")
        learned = i + 2 > EagerPlans.AFTER          # the step after the one that checked
        with no_device_sync() if learned else contextlib.nullcontext():
            step = ex.plan_step(b.input)
            ex.append_kv(step, b.cache, k, v)
            ex.forward(step, b.q, b.cache, out, sinks=b.sinks)
        ran.append(step.extra.get("decode_wrapper"))
        errs.append(rel_err(out, b.reference()))
    hp = ex._layouts.shape(bs, qd, first.table.shape[1]).own.planners.get(0)
    print(f"eager replay {name} ({ex.plan.decode.call}, {ex.plan.decode.flashinfer_backend}): rel errs "
          f"{[f'{e:.2e}' for e in errs]}, replays {getattr(getattr(hp, 'scheduler', None), 'replays', None)}, "
          f"refused {ex.backend.eager.refused}")
    assert max(errs) <= TOL
    if name == "sink-fa2" and hp is False:
        assert list(ex.backend.eager.refused.values()) == [
            "every other page-count set tried gave the same schedule: the check could not tell"]
        assert ran[EagerPlans.AFTER - 1:] == [None] * (steps + 1 - EagerPlans.AFTER)
        return
    assert hp and hp.scheduler.ready, ex.backend.eager.refused
    assert hp.shared and hp.scheduler.replays == steps + 1 - EagerPlans.AFTER
    assert all(w is hp.wrapper for w in ran[EagerPlans.AFTER - 2:])


@pytest.mark.parametrize("name", list(MLA_PLANS))
def test_mla_eager_steps_of_a_repeated_shape_call_the_scheduler_alone(name):
    from attnplan.adapter import StepInput
    from attnplan.adapter.eager_plans import EagerPlans

    ex = AttentionExecutor(MLA_PLANS[name](), device="cuda")
    gen, bs, longest, width, table, cache, lat = mla_batch(ex, 12)
    errs, steps, keep = [], 7, []
    for i in range(steps):
        seq = random_lens(bs - 1, 1, longest) + [longest if i == 0 else 1]
        q_nope, q_pe, latent, ref = mla_step(ex, table, cache, lat, seq, gen)
        seq_t = torch.tensor(seq, dtype=torch.int32)
        keep.append(seq_t.cuda())           # kept: new addresses each step, the copying layout throughout
        learned = i + 1 > EagerPlans.AFTER
        with no_device_sync() if learned else contextlib.nullcontext():
            step = ex.plan_step(StepInput([1] * bs, keep[-1], table, bs, seq_lens_cpu=seq_t))
            ex.append_latent(step, cache, latent)
            out = ex.mla_decode(step, q_nope, q_pe, cache)
        errs.append(rel_err(out, ref))
    hp = ex._layouts.shape(bs, 1, width).own.planners.get(0)
    print(f"MLA eager replay {name} ({ex.plan.decode.flashinfer_backend}): rel errs {[f'{e:.2e}' for e in errs]}, "
          f"replays {getattr(getattr(hp, 'scheduler', None), 'replays', None)}, refused {ex.backend.eager.refused}")
    assert max(errs) <= TOL
    assert hp and hp.scheduler.ready and hp.scheduler.replays == steps - EagerPlans.AFTER, ex.backend.eager.refused
    assert step.extra["decode_wrapper"] is hp.wrapper


@pytest.mark.parametrize("seed", range(6))
def test_fused_metadata_kernel_equals_the_torch_ops(seed):
    """The one-launch Triton metadata (decode_kernel.py) against the torch ops it replaces, over
    non-contiguous block tables, page sizes 1/5/16/64, q_len 1-4, lengths on page boundaries."""
    from attnplan.adapter.decode_layout import DecodeLayout

    gen = torch.Generator().manual_seed(seed)
    b, q, page = ((1, 1, 16), (7, 3, 1), (64, 1, 64), (300, 2, 16), (5, 4, 5), (129, 1, 16))[seed]
    seq = torch.randint(q, 3000, (b,), generator=gen)
    seq[0] = q
    seq[-1] = max(page, (int(seq[-1]) // page) * page)            # a full last page
    width = int(((seq + page - 1) // page).max()) + 2
    wide = torch.randperm(b * (width + 3) * 2, generator=gen)[: b * (width + 3)].view(b, width + 3).int().cuda()
    table, seq = wide[:, :width], seq.int().cuda()
    for indices in (True, False):
        fused = DecodeLayout(b, q, page, width, "cuda", bound=(seq, table), indices=indices)
        ref = DecodeLayout(b, q, page, width, "cuda", bound=(seq, table), indices=indices)
        assert fused._kernel is not None, "triton is importable on the GPU machine"
        fused.compute()
        ref.compute_torch()
        torch.cuda.synchronize()
        for name in ("slots", "slot_pages", "slot_offsets", "kv_indptr", "last_page_len"):
            assert torch.equal(getattr(fused, name), getattr(ref, name)), (name, indices)
        if indices:
            n = int(ref.kv_indptr[-1])
            assert n == int(((seq + page - 1) // page).sum())
            assert torch.equal(fused.kv_indices[:n], ref.kv_indices[:n])


# -- issue 41: metadata and append in one launch ----------------------------------------------------
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("page,q", [(16, 1), (16, 3), (32, 1), (32, 3)])
@pytest.mark.parametrize("mla", [False, True], ids=["kv", "mla"])
def test_fused_append_kernel_equals_metadata_then_append(layout, page, q, mla):
    """The one launch (decode_kernel.py, APPEND) against ``compute_torch`` + ``kv_cache.append`` on
    a copy of the same cache: every metadata output and the whole cache byte for byte, at the
    model's own row sizes (8 x 128 heads, MLA's 576-wide latent), lengths crossing page ends."""
    from attnplan.adapter.decode_layout import DecodeLayout
    from attnplan.policy import KVCachePlan

    if mla and layout == "HND":
        pytest.skip("an MLA cache has no head axis: one layout")
    gen = torch.Generator(device="cuda").manual_seed(page * 10 + q)
    plan = KVCachePlan(layout=layout, page_size=page, kv_storage_dtype="bfloat16", kv_view_dtype="bfloat16",
                       num_kv_heads=1 if mla else 8, head_dim_k=576 if mla else 128, head_dim_v=512 if mla else 128,
                       mla=mla)
    b = 37
    ends = [q, page, page + 1, 2 * page - 1, 3 * page, 40 * page + 2, 64 * page - 1]
    seq = torch.tensor([max(q, ends[i % len(ends)]) for i in range(b)], dtype=torch.int32, device="cuda")
    width = 64 + 1
    n_pages = b * (width + 2)
    table = torch.randperm(n_pages, device="cuda", generator=gen).view(b, width + 2)[:, :width].int()
    caches = []
    for _ in range(2):
        c = kvc.allocate(plan, n_pages, "cuda")
        c.data.copy_(torch.randn(c.data.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5)))
        caches.append(c)
    k = torch.randn(b * q, *((576,) if mla else (8, 128)), device="cuda", generator=gen).bfloat16()
    v = None if mla else torch.randn(b * q, 8, 128, device="cuda", generator=gen).bfloat16()
    for indices in (True, False):
        fused = DecodeLayout(b, q, page, width, "cuda", bound=(seq, table), indices=indices)
        ref = DecodeLayout(b, q, page, width, "cuda", bound=(seq, table), indices=indices)
        args = fused.fused_append(caches[0], k, v)
        assert args is not None, "a bf16 cache fed bf16 rows takes the fused launch"
        fused.compute_append(caches[0], k, v, args)
        ref.compute_torch()
        kvc.append(caches[1], ref.slots, k, v)
        torch.cuda.synchronize()
        for name in ("slots", "slot_pages", "slot_offsets", "kv_indptr", "last_page_len"):
            assert torch.equal(getattr(fused, name), getattr(ref, name)), (name, indices)
        if indices:
            n = int(ref.kv_indptr[-1])
            assert torch.equal(fused.kv_indices[:n], ref.kv_indices[:n])
        assert torch.equal(caches[0].data.view(torch.int16), caches[1].data.view(torch.int16)), indices
    # Each request's last new row is where the block table says (not a no-op on both sides).
    ar = torch.arange(b, device="cuda")
    pos = seq.long() - 1
    pages, offs = table[ar, pos // page].long(), pos % page
    view = caches[0].kernel_view()
    got = view[pages, offs] if mla else view[pages, 0, offs] if layout == "NHD" else view[pages, 0, :, offs]
    assert torch.equal(got.reshape(b, -1), k.view(b, q, -1)[:, -1])


@pytest.mark.parametrize("name", ["xqa", "fa2", "fa2-spec-q3", "mla-fa2"])
def test_graph_with_fused_append_equals_the_unfused_graph(name, monkeypatch):
    """The same steps through two DecodeGraphs over copies of one cache, one with metadata + append
    in one launch (the default for a bf16 cache), one with ``ATTNPLAN_FUSED_APPEND=0`` (metadata
    launch then ``kv_cache.append``): byte-equal caches after every step, outputs alike (same
    attention kernel over the same bytes; a kernel's own reduction order may differ run to run, so
    both are held to the reference's tolerance)."""
    if name.startswith("mla"):
        ex = AttentionExecutor(MLA_PLANS[name](), device="cuda")
        gen = torch.Generator(device="cuda").manual_seed(3)
        page, bs, longest = ex.plan.kv_cache.page_size, 5, 700
        width = (longest + page - 1) // page
        table = torch.randperm(bs * width, device="cuda", generator=gen).view(bs, width).int()
        base = ex.allocate_kv_cache(bs * width)
        base.data.normal_(generator=gen)
        lat = [torch.randn(longest, 576, device="cuda", generator=gen).bfloat16() for _ in range(bs)]
    else:
        ex = ex_for(name)
        qd, bs = ex.plan.decode.q_len_per_req, 5
        first = Batch(ex, [qd] * bs, random_lens(bs - 1, qd, 700) + [700], bs, poison="finite")
        table, base, width = first.table, first.cache, first.table.shape[1]
    graphs, caches, errs = [], [], []
    for env in ("1", "0"):
        monkeypatch.setenv("ATTNPLAN_FUSED_APPEND", env)
        cache = kvc.PagedKVCache(base.plan, base.data.clone(), None if base.scales is None else base.scales.clone())
        g = DecodeGraph(ex, bs, width, cache)
        assert (g.fused is not None) == (env == "1"), "bf16 caches fuse unless told not to"
        graphs.append(g)
        caches.append(cache)
    for i in range(3):
        if name.startswith("mla"):
            seq = random_lens(bs - 1, 1, longest) + [longest if i == 0 else 1]
            q_nope, q_pe, latent, ref = mla_step(ex, table, base, lat, seq, gen)
            for c in caches:        # the history both graphs read: the same bytes
                c.data.copy_(base.data)
            seq_t = torch.tensor(seq, dtype=torch.int32)
            inputs = (seq_t.cuda(), table, seq_t)
            feed = (q_nope, q_pe, latent)
        else:
            b = first if i == 0 else Batch(ex, [qd] * bs, random_lens(bs, qd, 700), bs, reuse=first, poison="finite")
            for c in caches:
                c.data.copy_(base.data)
            inputs = (b.input.seq_lens, b.table, b.input.seq_lens_cpu)
            feed = (b.q, *b.new_kv())
            ref = b.reference()
        outs = []
        for g in graphs:
            g.update(*inputs)
            if i == 0:
                g.capture()
            outs.append((g.replay_mla(*feed) if name.startswith("mla") else g.replay(*feed)).clone())
        torch.cuda.synchronize()
        assert torch.equal(caches[0].data.view(torch.uint8), caches[1].data.view(torch.uint8)), i
        errs.append((rel_err(outs[0], ref), rel_err(outs[1], ref)))
    print(f"fused-append graph {name}: caches byte-equal over 3 steps; rel errs fused / unfused "
          f"{[f'{a:.2e}/{b:.2e}' for a, b in errs]}")
    assert max(max(e) for e in errs) <= TOL

"""A decode-only step whose shape repeats (issue 41), on the CPU: everything but the lengths and the
block table comes from the shape's cache - its layout, its host arrays (rewritten in place), the
page-index view - and the step still equals a naive walk of the block table; a new batch size,
table width or q_len gets an entry of its own; ``defer_launch`` leaves every device write to
``launch()``. Through the executor (reference backend) the steady step is what the general path
builds. The GPU side (the same cache feeding FlashInfer's plans and DecodeGraph) is
tests/gpu/test_steady_step_gpu.py."""

from __future__ import annotations

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")

from attnplan.adapter import AttentionExecutor, StepInput, build_step  # noqa: E402
from attnplan.adapter.decode_layout import DecodeLayouts, HostDecodeArrays  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def plan(**kw):
    answer = plan_for(AttentionConfig(**LLAMA, **kw), simulated_node("H100"), engine="flashinfer")
    assert answer.ok, answer.violations
    return answer.plan


def naive(table, seq, q, page):
    slots = [int(table[r, pos // page]) * page + pos % page for r in range(len(seq)) for pos in range(seq[r] - q, seq[r])]
    indices = [int(table[r, j]) for r in range(len(seq)) for j in range((seq[r] + page - 1) // page)]
    indptr = [0]
    for s in seq:
        indptr.append(indptr[-1] + (s + page - 1) // page)
    return slots, indices, indptr, [(s - 1) % page + 1 for s in seq]


def step_input(seq, table, q=1):
    t = torch.tensor(seq, dtype=torch.int32)
    return StepInput([q] * len(seq), t, table, len(seq), seq_lens_cpu=t.clone())


def test_a_repeated_shape_reuses_its_cache_and_holds_the_new_lengths_and_table():
    p = plan()
    page = p.kv_cache.page_size
    layouts = DecodeLayouts(page, "cpu")
    gen = torch.Generator().manual_seed(41)
    seqs = ([100, 17, 64, 33], [101, 18, 63, 34], [16, 1, 200, 48], [129, 240, 2, 160])
    steps, hosts, views = [], [], []
    for i, seq in enumerate(seqs):
        # A fresh table (new tensors, same width) each step: the copying layout, new contents.
        table = torch.randperm(400, generator=gen)[: 4 * 16].view(4, 16).int()
        step = build_step(p, step_input(seq, table), layouts=layouts)
        slots, indices, indptr, last = naive(table, seq, 1, page)
        d = step.decode
        assert step.slots.tolist() == slots, i
        assert d.kv_indices.tolist() == indices and d.kv_page_indptr.tolist() == indptr, i
        assert d.last_page_len.tolist() == last and d.seq_lens_cpu.tolist() == seq, i
        assert d.kv_page_indptr_cpu.tolist() == indptr and d.last_page_len_cpu.tolist() == last, i
        assert d.max_kv_len == max(seq)
        assert torch.equal(step.extra["layout"].table, table)          # written into the shape's buffer
        entry = layouts.shape(4, 1, 16)
        steps.append(step)
        hosts.append(entry.host)
        views.append(d.kv_indices)
    assert len(layouts) == 1
    # One layout, one set of host arrays for every step of the shape: the step's host arrays are
    # the shape's buffers, rewritten in place (valid until the next step of the shape, as the
    # layout's device buffers are).
    assert all(s.extra["layout"] is steps[0].extra["layout"] for s in steps)
    assert all(h is hosts[0] for h in hosts)
    assert all(s.decode.seq_lens_cpu.data_ptr() == hosts[0].seq_lens.data_ptr() for s in steps)
    assert steps[0].decode.seq_lens_cpu.tolist() == seqs[-1]
    # The page-index view is kept while the page count repeats, and made anew when it changes.
    counts = [sum((s + page - 1) // page for s in seq) for seq in seqs]
    assert counts[0] == counts[1] and counts[1] != counts[2]
    assert views[0] is views[1] and views[2] is not views[1]


@pytest.mark.parametrize("change", ["batch", "width", "q_len"])
def test_a_shape_change_builds_a_new_entry_and_keeps_the_old(change):
    p = plan(num_speculative_tokens=1 if change == "q_len" else 0)
    page, q = p.kv_cache.page_size, p.decode.q_len_per_req
    layouts = DecodeLayouts(page, "cpu")
    seq = [40, 90, 7 + q]
    table = torch.arange(3 * 8, dtype=torch.int32).view(3, 8)
    first = build_step(p, step_input(seq, table, q), layouts=layouts)
    old = layouts.shape(3, q, 8)
    if change == "batch":
        seq2, table2, p2 = seq[:2], table[:2], p
    elif change == "width":
        seq2, table2, p2 = seq, torch.arange(3 * 10, dtype=torch.int32).view(3, 10), p
    else:
        p2 = plan(num_speculative_tokens=2)
        seq2, table2 = seq, table
    q2 = p2.decode.q_len_per_req
    second = build_step(p2, step_input(seq2, table2, q2), layouts=layouts)
    assert len(layouts) == 2
    assert second.extra["layout"] is not first.extra["layout"]
    new = layouts.shape(len(seq2), q2, int(table2.shape[1]))
    assert new is not old and new.host is not old.host
    slots, indices, indptr, last = naive(table2, seq2, q2, page)
    assert second.slots.tolist() == slots and second.decode.kv_indices.tolist() == indices
    assert second.decode.kv_page_indptr_cpu.tolist() == indptr and second.decode.num_tokens == q2 * len(seq2)
    # The first shape's entry is untouched by the second's step.
    assert layouts.shape(3, q, 8) is old and old.host.seq_lens.tolist() == seq
    assert first.slots.tolist() == naive(table, seq, q, page)[0]


def test_deferred_launch_writes_nothing_until_launched():
    """``plan_step`` runs FlashInfer's plan before the copies and the metadata replay; so the
    step handed back by ``build_step(defer_launch=True)`` has its host arrays filled but its
    device buffers untouched until ``launch()``."""
    p = plan()
    page = p.kv_cache.page_size
    layouts = DecodeLayouts(page, "cpu")
    table = torch.arange(2 * 6, dtype=torch.int32).view(2, 6)
    build_step(p, step_input([30, 50], table), layouts=layouts)
    table2 = table.flip(0).contiguous()
    step = build_step(p, step_input([31, 90], table2), layouts=layouts, defer_launch=True)
    lay = step.extra["layout"]
    assert step.decode.seq_lens_cpu.tolist() == [31, 90] and step.decode.kv_page_indptr_cpu.tolist() == [0, 2, 8]
    assert lay.seq_lens.tolist() == [30, 50] and torch.equal(lay.table, table)       # still the last step's
    step.extra["launch"]()
    slots, indices, indptr, last = naive(table2, [31, 90], 1, page)
    assert lay.seq_lens.tolist() == [31, 90] and step.slots.tolist() == slots
    assert step.decode.kv_indices.tolist() == indices and step.decode.kv_page_indptr.tolist() == indptr


@pytest.mark.parametrize("seq, match", [
    ([5], "^decode: 1 host KV lengths for a batch of 2 requests"),
    ([0, 9], "^decode: a request's KV length is shorter"),
    ([9, 4 * 16 + 1], "^decode: a request holds 65 KV tokens, more than its block table's 4 pages of 16"),
])
def test_host_arrays_refuse_lengths_the_shape_cannot_hold(seq, match):
    host = HostDecodeArrays(2, 1, 16, 4)
    host.fill([20, 30])
    with pytest.raises(ValueError, match=match):
        host.fill(torch.tensor(seq, dtype=torch.int32))
    assert host.seq_lens.tolist() == [20, 30]          # a refused step leaves the last one's arrays


def test_host_arrays_take_any_integer_lengths():
    host = HostDecodeArrays(3, 2, 16, 8)
    for seq in ([2, 16, 17], torch.tensor([128, 33, 2], dtype=torch.int64), (5, 6, 7)):
        host.fill(seq)
        vals = [int(x) for x in seq]
        _, _, indptr, last = naive(torch.zeros(3, 8, dtype=torch.int32), vals, 2, 16)
        assert host.seq_lens.tolist() == vals and host.seq_lens.dtype == torch.int32
        assert host.kv_indptr.tolist() == indptr and host.last_page_len.tolist() == last
        assert host.num_pages == indptr[-1] and host.max_kv_len == max(vals)


def test_executor_steady_steps_equal_the_general_path():
    """Through the executor: steps of one shape come from its cache, and attention over each
    equals attention over the general (per-step numpy) path's metadata for the same input."""
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"), engine="flashinfer")
    ex = AttentionExecutor(answer, device="cpu", backend="reference")
    gen = torch.Generator().manual_seed(4)
    cache = ex.allocate_kv_cache(64)
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen).to(cache.data.dtype))
    table = torch.randperm(64, generator=gen)[:15].view(3, 5).int()
    for i, seq in enumerate(([20, 70, 33], [21, 71, 34], [80, 3, 49])):
        inp = step_input(seq, table)
        q = torch.randn(3, 32, 128, generator=gen).to(torch.bfloat16)
        step = ex.plan_step(inp)
        assert step.extra["layout"] is ex._layouts.shape(3, 1, 5).own or step.extra["layout"].bound
        assert "staging_slot" not in step.extra
        out = ex.forward(step, q, cache)
        ref = ex.forward(build_step(ex.plan, inp), q, cache)
        assert torch.equal(out, ref), i
    assert len(ex._layouts) == 1


def test_a_plan_that_plans_nothing_on_the_host_gets_the_checked_bound_alone():
    """XQA (vLLM's decode on 9.0) reads device tensors only: its steady step fills no host arrays,
    yet its KV bound is the exact longest length and impossible lengths are still refused."""
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"), engine="vllm")
    p = answer.plan
    assert p.decode.call == "xqa_decode" and not p.metadata.decode_only.needs_host_seq_lens
    layouts = DecodeLayouts(p.kv_cache.page_size, "cpu", indices=False)
    table = torch.arange(3 * 8, dtype=torch.int32).view(3, 8)
    for seq in ([40, 90, 7], [41, 91, 128]):
        step = build_step(p, step_input(seq, table), layouts=layouts)
        assert step.decode.max_kv_len == max(seq) and step.decode.seq_lens_cpu is None
        assert step.slots.tolist() == naive(table, seq, 1, p.kv_cache.page_size)[0]
    with pytest.raises(ValueError, match="more than its block table's 8 pages"):
        build_step(p, step_input([40, 129, 7], table), layouts=layouts)
    with pytest.raises(ValueError, match="shorter than its query length"):
        build_step(p, step_input([40, 0, 7], table), layouts=layouts)


def test_a_graph_replays_its_first_plans_arguments_which_are_the_refilled_host_arrays():
    """DecodeGraph records the first plan a strategy makes (host_plan.py ``_PlanRecorder``) and replays those
    arguments each step: they must be the shape's host arrays themselves, so a refill is what
    the next plan reads - held here with the real fa2 decode strategy and a wrapper that keeps
    what its plan saw."""
    from types import SimpleNamespace

    from attnplan.adapter.calls import strategy
    from attnplan.adapter.decode_layout import DecodeLayout
    from attnplan.adapter.host_plan import _PlanRecorder
    from attnplan.adapter.params import AttentionParams

    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"), engine="flashinfer")
    p = answer.plan
    call = strategy(p.decode.call)
    assert call.host_planned and not call.graph_plan_counts_indices
    page = p.kv_cache.page_size

    class Wrapper:
        seen = []

        def plan(self, *args, **kwargs):
            self.seen.append((args[0].tolist(), args[2].tolist(), kwargs["seq_lens"].tolist()))

    ctx = SimpleNamespace(params=AttentionParams.from_answer(answer), plan=p, common={"decode": {"non_blocking": True}})
    lay = DecodeLayout(3, 1, page, 8, "cpu")
    host = HostDecodeArrays(3, 1, page, 8).fill([20, 33, 1])
    batch = lay.phase_batch(lay.seq_lens, lay.table, host.max_kv_len, torch.empty(0, dtype=torch.int32), host)
    w = Wrapper()
    rec = _PlanRecorder(w)
    call.plan(ctx, rec, batch, "decode")
    args, kwargs = rec.seen
    host.fill([100, 16, 17])
    w.plan(*args, **kwargs)                                   # what DecodeGraph.update replays
    _, _, indptr, last = naive(torch.zeros(3, 8, dtype=torch.int32), [100, 16, 17], 1, page)
    assert w.seen == [([0, 2, 5, 6], [4, 1, 1], [20, 33, 1]), (indptr, last, [100, 16, 17])]

"""Decode-only steps through their shape's layout (adapter/decode_layout.py, issue 17), on the CPU:
the same fixed-shape ops the GPU captures, held to a naive walk of the block table, to the general
host path and to the device path, across steps that reuse one layout's buffers."""

from __future__ import annotations

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")

from attnplan.adapter import AttentionExecutor, StepInput, build_step  # noqa: E402
from attnplan.adapter.decode_layout import DecodeLayouts  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def plan(node="H100", engine="flashinfer", **kw):
    answer = plan_for(AttentionConfig(**kw), simulated_node(node, cubins="available") if node.startswith("B")
                      else simulated_node(node), engine=engine)
    assert answer.ok, answer.violations
    return answer.plan


def with_page(p, page):
    """The same plan over another page size (the layout takes any; the rules decide elsewhere)."""
    return p.model_copy(update={"kv_cache": p.kv_cache.model_copy(update={"page_size": page})})


def random_decode(p, gen, *, b=None, spare_columns=2, host=True):
    """A decode-only step over a column slice of a wider block table (an engine's persistent
    table is wider than a step needs, so gathers must honour the row stride)."""
    page, q = p.kv_cache.page_size, p.decode.q_len_per_req
    b = b or int(torch.randint(1, 12, (1,), generator=gen))
    seq = [q + int(torch.randint(0, 300, (1,), generator=gen)) for _ in range(b)]
    width = max((s + page - 1) // page for s in seq)
    wide = torch.randperm(b * (width + spare_columns) * 3, generator=gen)[: b * (width + spare_columns)]
    table = wide.view(b, width + spare_columns).int()[:, :width]
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return StepInput([q] * b, seq_t, table, b, seq_lens_cpu=seq_t.clone() if host else None), seq


def naive(table, seq, q, page):
    slots = [int(table[r, pos // page]) * page + pos % page for r in range(len(seq)) for pos in range(seq[r] - q, seq[r])]
    indices = [int(table[r, j]) for r in range(len(seq)) for j in range((seq[r] + page - 1) // page)]
    pages = [(s + page - 1) // page for s in seq]
    indptr = [0]
    for n in pages:
        indptr.append(indptr[-1] + n)
    return slots, indices, indptr, [(s - 1) % page + 1 for s in seq]


@pytest.mark.parametrize("seed", range(10))
def test_layout_step_follows_a_naive_walk(seed):
    gen = torch.Generator().manual_seed(seed)
    p = with_page(plan(**LLAMA, num_speculative_tokens=seed % 3), (1, 5, 16, 64)[seed % 4])
    layouts = DecodeLayouts(p.kv_cache.page_size, "cpu")
    inp, seq = random_decode(p, gen)
    step = build_step(p, inp, layouts=layouts)
    assert "layout" in step.extra and step.kind == "decode_only" and step.prefill is None
    q, page = p.decode.q_len_per_req, p.kv_cache.page_size
    slots, indices, indptr, last = naive(inp.block_table, seq, q, page)
    d = step.decode
    assert step.slots.tolist() == slots
    assert (step.slot_pages * page + step.slot_offsets).tolist() == slots
    assert step.slot_offsets.max() < page and step.slot_offsets.min() >= 0
    assert d.kv_indices.tolist() == indices
    assert d.kv_page_indptr.tolist() == d.kv_page_indptr_cpu.tolist() == indptr
    assert d.last_page_len.tolist() == d.last_page_len_cpu.tolist() == last
    assert d.qo_indptr.tolist() == d.qo_indptr_cpu.tolist() == [q * i for i in range(len(seq) + 1)]
    assert d.seq_lens_cpu.tolist() == seq and d.max_kv_len == max(seq) and d.num_tokens == q * len(seq)


@pytest.mark.parametrize("seed", range(6))
def test_layout_and_general_host_path_agree(seed):
    """The same step with and without layouts (the general numpy path), tensor for tensor."""
    gen = torch.Generator().manual_seed(100 + seed)
    p = plan(**LLAMA, num_speculative_tokens=seed % 2)
    inp, _ = random_decode(p, gen)
    fast = build_step(p, inp, layouts=DecodeLayouts(p.kv_cache.page_size, "cpu"))
    slow = build_step(p, inp)
    assert "layout" not in slow.extra
    assert torch.equal(fast.slots, slow.slots)
    for name in ("qo_indptr", "kv_page_indptr", "last_page_len", "kv_indices", "qo_indptr_cpu",
                 "kv_page_indptr_cpu", "last_page_len_cpu", "seq_lens_cpu"):
        a, b = getattr(fast.decode, name), getattr(slow.decode, name)
        assert torch.equal(a.to(b.dtype), b), name
    assert (fast.decode.max_kv_len, fast.decode.query_lens) == (slow.decode.max_kv_len, slow.decode.query_lens)


@pytest.mark.parametrize("seed", range(4))
def test_device_only_lengths_take_the_layout_too(seed):
    """A TRTLLM-gen plan (B200) builds decode steps from device tensors alone: layout and device
    path give the same step; the KV bound is the table's width without host lengths."""
    gen = torch.Generator().manual_seed(200 + seed)
    p = plan("B200", **LLAMA, num_speculative_tokens=seed % 3)
    inp, _ = random_decode(p, gen, host=False)
    fast = build_step(p, inp, layouts=DecodeLayouts(p.kv_cache.page_size, "cpu"))
    dev = build_step(p, inp)
    assert torch.equal(fast.slots, dev.slots)
    for name in ("qo_indptr", "kv_page_indptr", "last_page_len", "seq_lens", "block_table"):
        assert torch.equal(getattr(fast.decode, name), getattr(dev.decode, name)), name
    assert fast.decode.max_kv_len == dev.decode.max_kv_len == inp.block_table.shape[1] * p.kv_cache.page_size


def test_one_layout_serves_every_step_of_its_shape():
    """Steps of one shape rewrite one layout's buffers; a step with fewer pages than the one before
    it sees only its own indices (entries past its last page are not handed out)."""
    p = plan(**LLAMA)
    page = p.kv_cache.page_size
    layouts = DecodeLayouts(page, "cpu")
    gen = torch.Generator().manual_seed(7)
    long_seq = torch.tensor([600, 700, 800], dtype=torch.int32)
    table = torch.randperm(400, generator=gen)[:3 * 60].view(3, 60).int()
    first = build_step(p, StepInput([1, 1, 1], long_seq, table, 3, seq_lens_cpu=long_seq.clone()), layouts=layouts)
    first_indices = first.decode.kv_indices.clone()
    short = torch.tensor([3, 17, 40], dtype=torch.int32)
    second = build_step(p, StepInput([1, 1, 1], short, table, 3, seq_lens_cpu=short.clone()), layouts=layouts)
    assert len(layouts) == 1 and first.extra["layout"] is second.extra["layout"]
    slots, indices, indptr, last = naive(table, short.tolist(), 1, page)
    assert second.slots.tolist() == slots and second.decode.kv_indices.tolist() == indices
    assert second.decode.kv_page_indptr.tolist() == indptr and second.decode.last_page_len.tolist() == last
    assert first_indices.tolist() != indices                 # a real change, not one step read twice
    build_step(p, StepInput([1, 1], short[:2], table[:2], 2, seq_lens_cpu=short[:2].clone()), layouts=layouts)
    assert len(layouts) == 2                                 # another batch size, another layout


def test_layouts_drop_the_least_recently_used(monkeypatch):
    monkeypatch.setattr(DecodeLayouts, "MAX", 2)
    layouts = DecodeLayouts(16, "cpu")
    a, b = layouts.get(1, 1, 4), layouts.get(2, 1, 4)
    assert layouts.get(1, 1, 4) is a                         # a is now the most recent
    layouts.get(3, 1, 4)
    assert len(layouts) == 2 and layouts.get(1, 1, 4) is a and layouts.get(2, 1, 4) is not b


def test_mixed_and_prefill_steps_keep_the_general_path():
    p = plan(**LLAMA)
    layouts = DecodeLayouts(p.kv_cache.page_size, "cpu")
    seq = torch.tensor([40, 90], dtype=torch.int32)
    table = torch.arange(20, dtype=torch.int32).view(2, 10)
    for q, nd in (([1, 30], 1), ([30, 30], 0)):
        step = build_step(p, StepInput(q, seq, table, nd, seq_lens_cpu=seq.clone()), layouts=layouts)
        assert "layout" not in step.extra
    assert len(layouts) == 0


@pytest.mark.parametrize("seq, match", [
    ([0, 9], "^decode: a request's KV length is shorter"),
    ([9, 10 * 16 + 1], "^decode: a request holds 161 KV tokens, more than its block table's 10 pages of 16"),
])
def test_bad_lengths_are_refused_on_the_host(seq, match):
    p = plan(**LLAMA)
    t = torch.tensor(seq, dtype=torch.int32)
    inp = StepInput([1, 1], t, torch.zeros(2, 10, dtype=torch.int32), 2, seq_lens_cpu=t.clone())
    with pytest.raises(ValueError, match=match):
        build_step(p, inp, layouts=DecodeLayouts(16, "cpu"))


def test_wrong_decode_query_lengths_are_named_not_laid_out():
    p = plan(**LLAMA, num_speculative_tokens=2)
    t = torch.tensor([9, 10], dtype=torch.int32)
    inp = StepInput([3, 1], t, torch.zeros(2, 10, dtype=torch.int32), 2, seq_lens_cpu=t.clone())
    with pytest.raises(ValueError, match=r"requests \[1\] have \[1\]"):
        build_step(p, inp, layouts=DecodeLayouts(16, "cpu"))


def test_executor_decode_steps_use_layouts_and_match_the_reference_walk():
    """Through the executor (reference backend on the CPU): decode-only steps come from layouts,
    and attention over them equals attention over the general path's metadata."""
    answer = plan_for(AttentionConfig(**LLAMA), simulated_node("H100"), engine="flashinfer")
    ex = AttentionExecutor(answer, device="cpu", backend="reference")
    gen = torch.Generator().manual_seed(3)
    cache = ex.allocate_kv_cache(64)
    cache.data.copy_(torch.randn(cache.data.shape, generator=gen).to(cache.data.dtype))
    seq = torch.tensor([20, 70, 33], dtype=torch.int32)
    table = torch.randperm(64, generator=gen)[:15].view(3, 5).int()
    inp = StepInput([1, 1, 1], seq, table, 3, seq_lens_cpu=seq.clone())
    q = torch.randn(3, 32, 128, generator=gen).to(torch.bfloat16)
    step = ex.plan_step(inp)
    assert "layout" in step.extra
    out = ex.forward(step, q, cache)
    ref = ex.forward(build_step(ex.plan, inp), q, cache)
    assert torch.equal(out, ref)


def test_a_callers_persistent_tensors_are_read_in_place_once_they_repeat():
    """An engine that keeps its lengths and block table in the same tensors step after step (as
    vLLM does) gets a layout bound to them: no copies, and in-place updates are what it reads."""
    p = plan(**LLAMA)
    page = p.kv_cache.page_size
    layouts = DecodeLayouts(page, "cpu")
    gen = torch.Generator().manual_seed(5)
    seq = torch.tensor([30, 90, 7, 64], dtype=torch.int32)
    table = torch.randperm(200, generator=gen)[:4 * 8].view(4, 8).int()
    inp = StepInput([1] * 4, seq, table, 4, seq_lens_cpu=seq)
    bound = []
    for i in range(DecodeLayouts.BIND_AFTER + 2):
        seq.add_(1)                                           # the engine's in-place update
        table[i % 4, 7] = 150 + i
        step = build_step(p, inp, layouts=layouts)
        bound.append(step.extra["layout"].bound)
        slots, indices, indptr, last = naive(table, seq.tolist(), 1, page)
        assert step.slots.tolist() == slots and step.decode.kv_indices.tolist() == indices, i
        assert step.decode.kv_page_indptr.tolist() == indptr and step.decode.last_page_len.tolist() == last
    assert bound == [False] * (DecodeLayouts.BIND_AFTER - 1) + [True] * 3
    assert step.extra["layout"].table is table and step.extra["layout"].seq_lens is seq
    # Other tensors (same values): the layout that copies, and the same answer.
    other = StepInput([1] * 4, seq.clone(), table.clone(), 4, seq_lens_cpu=seq.clone())
    step = build_step(p, other, layouts=layouts)
    assert not step.extra["layout"].bound and step.decode.kv_indices.tolist() == indices
    assert len(layouts) == 1


def test_layouts_without_page_indices_refuse_a_plan_that_reads_them():
    """XQA and TRTLLM-gen read the block table itself, so their executors' layouts skip the page
    indices; a plan whose kernel reads them is never handed such a layout silently."""
    p = plan(**LLAMA)
    assert p.metadata.decode_only.needs_paged_kv_indices
    seq = torch.tensor([9, 20], dtype=torch.int32)
    inp = StepInput([1, 1], seq, torch.zeros(2, 4, dtype=torch.int32), 2, seq_lens_cpu=seq.clone())
    with pytest.raises(ValueError, match="reads paged KV indices"):
        build_step(p, inp, layouts=DecodeLayouts(16, "cpu", indices=False))
    b200 = plan("B200", **LLAMA)
    assert not b200.metadata.decode_only.needs_paged_kv_indices
    ex = AttentionExecutor(plan_for(AttentionConfig(**LLAMA), simulated_node("B200", cubins="available")),
                           device="cpu", backend="reference")
    assert ex._layouts.indices is False
    step = ex.plan_step(StepInput([1, 1], seq, torch.arange(8, dtype=torch.int32).view(2, 4), 2))
    assert step.decode.kv_indices is None and step.slots.tolist() == naive(torch.arange(8).view(2, 4), [9, 20], 1,
                                                                           b200.kv_cache.page_size)[0]


def test_the_fused_kernel_is_cuda_only_and_can_be_turned_off(monkeypatch):
    """The one-launch Triton metadata runs on CUDA devices only; ATTNPLAN_DECODE_METADATA=torch
    keeps the torch ops there too (the benchmark's A/B), without importing triton at all."""
    import sys

    from attnplan.adapter.decode_layout import _fused_kernel

    assert _fused_kernel(torch.device("cpu")) is None
    assert DecodeLayouts(16, "cpu").get(2, 1, 4)._kernel is None
    monkeypatch.setenv("ATTNPLAN_DECODE_METADATA", "torch")
    monkeypatch.setitem(sys.modules, "triton", None)           # importing it would raise
    assert _fused_kernel(torch.device("cuda")) is None
    monkeypatch.delenv("ATTNPLAN_DECODE_METADATA")
    assert _fused_kernel(torch.device("cuda")) is None           # no triton here: the torch ops

"""Paged KV cache and step metadata built from the plan (seed 001, seed 002), on the CPU."""

from __future__ import annotations

import itertools

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")

from attnplan.adapter import AttentionExecutor, StepInput, allocate, build_step  # noqa: E402
from attnplan.adapter import kv_cache as kvc  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def plan(node="H100", engine="flashinfer", **kw):
    """Kernel-truth plans by default (native fa2 decode on the H100: these tests exercise the host
    metadata native kernels need); ``engine="vllm"`` for vLLM 0.33's choice (XQA decode there)."""
    answer = plan_for(AttentionConfig(**kw), simulated_node(node, cubins="available") if node.startswith(("B", "GB"))
                      else simulated_node(node), engine=engine)
    assert answer.ok, answer.violations
    return answer.plan


@pytest.mark.parametrize("node, kw, storage, view, layout", [
    ("H100", dict(LLAMA), torch.bfloat16, torch.bfloat16, "NHD"),
    ("H100", dict(LLAMA, kv_cache_dtype="fp8"), torch.uint8, torch.float8_e4m3fn, "NHD"),
    ("H100", dict(LLAMA, kv_cache_dtype="fp8_e5m2"), torch.uint8, torch.float8_e5m2, "NHD"),
    ("B200", dict(LLAMA, kv_cache_dtype="fp8"), torch.uint8, torch.float8_e4m3fn, "HND"),
])
def test_cache_dtypes_and_layout_come_from_the_plan(node, kw, storage, view, layout):
    p = plan(node, **kw)
    cache = allocate(p.kv_cache, 5, "cpu")
    assert cache.data.dtype == storage and cache.kernel_view().dtype == view
    assert p.kv_cache.layout == layout
    inner = (p.kv_cache.page_size, 8) if layout == "NHD" else (8, p.kv_cache.page_size)
    assert tuple(cache.data.shape) == (5, 2, *inner, 128)


def test_uint8_is_never_read_as_nvfp4():
    """Seed 002: the same uint8 bytes are fp8 under an fp8 plan and packed fp4 only under an nvfp4
    plan; the tensor's dtype decides nothing."""
    fp8 = plan("B200", **LLAMA, kv_cache_dtype="fp8").kv_cache
    fp4 = plan("B200", head_dim=128, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4").kv_cache
    a, b = allocate(fp8, 3, "cpu"), allocate(fp4, 3, "cpu")
    assert a.data.dtype == b.data.dtype == torch.uint8
    assert a.kernel_view().dtype == torch.float8_e4m3fn and a.scales is None
    assert b.kernel_view().dtype == torch.uint8 and b.data.shape[-1] == 64          # two e2m1 per byte
    assert b.scales.dtype == torch.float8_e4m3fn and b.scales.shape[-1] == 128 // 16


def test_mla_latent_cache():
    p = plan("H100", **MLA)
    cache = allocate(p.kv_cache, 4, "cpu")
    assert tuple(cache.data.shape) == (4, p.kv_cache.page_size, 576)
    assert cache.ckv().shape[-1] == 512 and cache.kpe().shape[-1] == 64


def _step_input(p, q_lens, seq, nd, *, host=True, width=None):
    page = p.kv_cache.page_size
    width = width or max((s + page - 1) // page for s in seq)
    gen = torch.Generator().manual_seed(len(seq))
    table = torch.randperm(len(seq) * width + 7, generator=gen)[: len(seq) * width].view(len(seq), width).int()
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return StepInput(query_lens=q_lens, seq_lens=seq_t, block_table=table, num_decodes=nd,
                     seq_lens_cpu=seq_t.clone() if host else None)


def test_indptr_indices_slots_follow_the_step():
    p = plan("H100", **LLAMA)
    page = p.kv_cache.page_size
    inp = _step_input(p, [1, 1, 7, 40], [9, 33, 7, 70], 2)
    step = build_step(p, inp)
    assert step.kind == "mixed"
    dec, pre = step.decode, step.prefill
    assert dec.kv_page_indptr.tolist() == [0, 1, 4]
    assert pre.kv_page_indptr.tolist() == [0, 1, 6]
    assert pre.kv_page_indptr_cpu.tolist() == pre.kv_page_indptr.tolist()
    assert pre.kv_indices.tolist() == inp.block_table[2, :1].tolist() + inp.block_table[3, :5].tolist()
    assert pre.last_page_len.tolist() == [7, 70 - 4 * page]
    assert (pre.tok.start, pre.tok.stop) == (2, 49)
    # The last new token of request 3 sits at position 69.
    assert step.slots[-1].item() == inp.block_table[3, 69 // page].item() * page + 69 % page
    assert step.slots.shape[0] == 49 and len(set(step.slots.tolist())) == 49


def test_prefill_indptr_is_fresh_each_step():
    """Seed 001: the device KV indptr is recomputed from this step's lengths, never reused."""
    p = plan("H100", **LLAMA)
    a = build_step(p, _step_input(p, [4, 4], [4, 40], 0, width=4))
    b = build_step(p, _step_input(p, [4, 4], [20, 4], 0, width=4))
    assert a.prefill.kv_page_indptr.tolist() == [0, 1, 4]
    assert b.prefill.kv_page_indptr.tolist() == [0, 2, 3]
    assert a.prefill.kv_page_indptr.data_ptr() != b.prefill.kv_page_indptr.data_ptr()


def test_native_plan_needs_host_seq_lens_and_trtllm_plan_does_not():
    native = plan("H100", **LLAMA)
    with pytest.raises(ValueError, match="needs host seq lens"):
        build_step(native, _step_input(native, [1, 1], [5, 9], 2, host=False))
    trt = plan("B200", **LLAMA)
    assert trt.metadata.mixed.all_uses_trtllm and not trt.metadata.mixed.needs_host_seq_lens
    step = build_step(trt, _step_input(trt, [1, 5], [5, 9], 1, host=False))
    for b in (step.decode, step.prefill):
        assert b.kv_indices is None and b.seq_lens_cpu is None and b.kv_page_indptr_cpu is None
    assert step.prefill.kv_page_indptr.tolist() == [0, 1]


def test_decode_requests_take_the_plans_query_length():
    p = plan("H100", **LLAMA, num_speculative_tokens=2)
    assert p.decode.q_len_per_req == 3 and p.decode.runs_on_prefill_kernel
    with pytest.raises(ValueError, match="q_len_per_req"):
        build_step(p, _step_input(p, [1, 3], [5, 9], 2))
    assert build_step(p, _step_input(p, [3, 3], [5, 9], 2)).decode.num_tokens == 6


def _random_step(p, seed, *, spare_columns=3):
    """A random mixed batch over a block table that is a column slice of a wider one (as an
    engine's persistent table is), so gathers must honour the row stride."""
    gen = torch.Generator().manual_seed(seed)
    page, q_dec = p.kv_cache.page_size, p.decode.q_len_per_req
    nd = int(torch.randint(0, 6, (1,), generator=gen))
    npre = int(torch.randint(0 if nd else 1, 5, (1,), generator=gen))
    q = [q_dec] * nd + torch.randint(1, 300, (npre,), generator=gen).tolist()
    seq = [x + int(torch.randint(0, 900, (1,), generator=gen)) for x in q]
    width = max((s + page - 1) // page for s in seq)
    wide = torch.randperm(len(q) * (width + spare_columns) * 2, generator=gen)[: len(q) * (width + spare_columns)]
    table = wide.view(len(q), width + spare_columns).int()[:, :width]
    assert not table.is_contiguous()
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return q, seq, nd, table, seq_t


@pytest.mark.parametrize("seed", range(8))
def test_host_and_device_metadata_agree(seed):
    """Host lengths take the host path, device-only lengths the device path (TRTLLM-gen plans
    accept both): the same step must come out of either."""
    p = plan("B200", **LLAMA, num_speculative_tokens=seed % 3)
    q, _, nd, table, seq_t = _random_step(p, seed)
    host = build_step(p, StepInput(q, seq_t, table, nd, seq_lens_cpu=seq_t.clone()))
    dev = build_step(p, StepInput(q, seq_t, table, nd))
    assert host.kind == dev.kind and torch.equal(host.slots, dev.slots)
    for phase in ("decode", "prefill"):
        a, b = getattr(host, phase), getattr(dev, phase)
        assert (a is None) == (b is None)
        if a is None:
            continue
        assert (a.tok, a.num_tokens, a.max_q_len, a.query_lens) == (b.tok, b.num_tokens, b.max_q_len, b.query_lens)
        for name in ("qo_indptr", "kv_page_indptr", "last_page_len", "seq_lens", "block_table", "qo_indptr_cpu"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (phase, name)
        assert a.max_kv_len == int(a.seq_lens.max()) <= b.max_kv_len      # exact on the host, a bound without


@pytest.mark.parametrize("seed", range(8))
def test_slots_and_page_indices_follow_a_naive_walk(seed):
    p = plan("H100", **LLAMA, num_speculative_tokens=seed % 2)
    page = p.kv_cache.page_size
    q, seq, nd, table, seq_t = _random_step(p, 100 + seed)
    step = build_step(p, StepInput(q, seq_t, table, nd, seq_lens_cpu=seq_t.clone()))
    slots = [int(table[r, pos // page]) * page + pos % page for r in range(len(q)) for pos in range(seq[r] - q[r], seq[r])]
    assert step.slots.tolist() == slots
    for b in (step.decode, step.prefill):
        if b is None:
            continue
        rows = range(b.req.start, b.req.stop)
        assert b.kv_indices.tolist() == [int(table[r, j]) for r in rows for j in range((seq[r] + page - 1) // page)]
        assert b.kv_page_indptr_cpu.tolist() == b.kv_page_indptr.tolist()
        assert b.last_page_len_cpu.tolist() == [(seq[r] - 1) % page + 1 for r in rows]
        assert b.qo_indptr_cpu.tolist() == b.qo_indptr.tolist() == [0, *itertools.accumulate(q[r] for r in rows)]


def test_short_kv_is_refused_naming_the_phase():
    p = plan("H100", **LLAMA)
    with pytest.raises(ValueError, match="^prefill: a request's KV length is shorter"):
        build_step(p, _step_input(p, [1, 9], [4, 8], 1))
    with pytest.raises(ValueError, match="^decode: "):
        build_step(p, StepInput([1], torch.tensor([0], dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32), 1,
                                seq_lens_cpu=torch.tensor([0], dtype=torch.int32)))


@pytest.mark.parametrize("kw", [dict(LLAMA), dict(LLAMA, kv_cache_dtype="fp8"), dict(LLAMA, kv_cache_dtype="fp8_e5m2")])
@pytest.mark.parametrize("node", ["H100", "B200"])
def test_append_then_gather_round_trips(kw, node):
    p = plan(node, **kw)
    inp = _step_input(p, [3, 20], [3, 37], 0)
    step = build_step(p, inp)
    cache = allocate(p.kv_cache, int(inp.block_table.max()) + 1, "cpu")
    cache.data.fill_(0xFF if cache.data.dtype == torch.uint8 else float("nan"))
    k = torch.randn(step.num_tokens, 8, 128).bfloat16()
    v = torch.randn(step.num_tokens, 8, 128).bfloat16()
    kvc.append(cache, step.slots, k, v, k_scale=0.5, v_scale=2.0)
    page = p.kv_cache.page_size
    got_k, got_v = kvc.gather(cache, inp.block_table[1, : (37 + page - 1) // page].long(), 37, k_scale=0.5, v_scale=2.0)
    tol = 0 if "kv_cache_dtype" not in kw else 0.13
    assert torch.allclose(got_k[17:], k[3:].float(), rtol=tol, atol=tol)
    assert torch.allclose(got_v[17:], v[3:].float(), rtol=tol, atol=tol * 2)


def test_nvfp4_append_round_trips_within_fp4_error():
    p = plan("B200", head_dim=128, num_qo_heads=32, num_kv_heads=8, kv_cache_dtype="nvfp4")
    inp = _step_input(p, [16], [16], 0)
    step = build_step(p, inp)
    cache = allocate(p.kv_cache, int(inp.block_table.max()) + 1, "cpu")
    k, v = torch.randn(16, 8, 128), torch.randn(16, 8, 128)
    kvc.append(cache, step.slots, k, v)
    got_k, _ = kvc.gather(cache, inp.block_table[0, :1].long(), 16)
    rel = (got_k - k).norm() / k.norm()
    assert 0 < rel < 0.2


def test_executor_allocates_from_the_plan():
    # the kernel layer's plan: vLLM 0.33 refuses e5m2 on 9.0 (an e5m2 query on fa3/fa2, issue 21)
    answer = plan_for(AttentionConfig(**LLAMA, kv_cache_dtype="fp8_e5m2"), simulated_node("H100"), engine="flashinfer")
    ex = AttentionExecutor(answer, device="cpu", backend="reference")
    cache = ex.allocate_kv_cache(3)
    assert cache.kernel_view().dtype == torch.float8_e5m2


def test_warmup_module_arguments_match_the_wrappers():
    """The getter arguments warm-up passes are the ones FlashInfer's wrappers pass at plan time
    (their memo key), so the wrappers reuse what warm-up built."""
    from attnplan.adapter.warmup import MERGE, _module_args, plan_modules

    p = plan("H100", **LLAMA)
    pre, dec, *alt = plan_modules(p)       # alt: the per-shape decode choice's XQA module (plan.decode_choice)
    assert alt and [_module_args(m)[:2] for m in alt] == [("xqa", "xqa")] * len(alt)
    assert _module_args(pre) == ("prefill", "fa3", (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32,
                                                    128, 128, 0, False, False, False))
    assert _module_args(dec)[:2] == ("prefill", "fa2")            # tensor-core decode = prefill module
    mha = plan("H100", head_dim=128, num_qo_heads=8, num_kv_heads=8, kv_cache_dtype="fp8_e5m2", sliding_window=9)
    assert _module_args(plan_modules(mha)[-1]) == ("decode", "fa2", (torch.bfloat16, torch.float8_e5m2, torch.bfloat16,
                                                                     torch.int32, 128, 128, 0, True, False))
    mla = plan("H100", **MLA)
    by_kind = {_module_args(m)[0]: m for m in plan_modules(mla)}
    assert _module_args(by_kind["mla"]) == ("mla", "fa3", (torch.bfloat16,) * 3 + (torch.int32, 512, 64, False))
    assert _module_args(by_kind["prefill"])[2][4:6] == (192, 128)
    # MLA chunked prefill merges by LSE: the merge kernel is loaded exactly once (the plan's own
    # entry when the policy lists it, else warm-up's MERGE); a standard plan loads none.
    assert sum(_module_args(m)[0] == "merge" for m in plan_modules(mla)) == 1
    assert all(_module_args(m)[0] != "merge" for m in plan_modules(p)) and MERGE not in plan_modules(p)
    bare = mla.model_copy(update={"prefill": mla.prefill.model_copy(update={"modules": mla.prefill.modules[:1]})})
    assert plan_modules(bare)[-1] is MERGE


def test_warmup_takes_the_backend_argument_from_the_phase_plan():
    """FlashInfer's backend argument comes from the phase plan, not from the backend's name: a
    plan whose fa3-mla decode says ``flashinfer_backend='fa2'`` loads the fa2 MLA module."""
    from attnplan.adapter.warmup import _module_args, plan_modules

    mla = plan("H100", **MLA)
    odd = mla.model_copy(update={"decode": mla.decode.model_copy(update={"flashinfer_backend": "fa2"})})
    assert {m.phase: _module_args(m)[1] for m in plan_modules(odd) if _module_args(m)[0] != "merge"} == \
        {"prefill": "fa3", "decode": "fa2"}


@pytest.mark.parametrize("seed", range(3))
def test_page_indices_expanded_on_host_or_device_agree(seed, monkeypatch):
    """Small steps send each page's block-table entry from the host, large ones expand on the
    device (host_metadata.HOST_KV_ENTRIES); both give the same page indices and slots."""
    from attnplan.adapter import host_metadata

    p = plan("H100", **LLAMA)
    q, _, nd, table, seq_t = _random_step(p, 500 + seed)
    small = build_step(p, StepInput(q, seq_t, table, nd, seq_lens_cpu=seq_t.clone()))
    monkeypatch.setattr(host_metadata, "HOST_KV_ENTRIES", 0)
    large = build_step(p, StepInput(q, seq_t, table, nd, seq_lens_cpu=seq_t.clone()))
    assert torch.equal(small.slots, large.slots)
    for phase in ("decode", "prefill"):
        a, b = getattr(small, phase), getattr(large, phase)
        if a is not None:
            assert torch.equal(a.kv_indices, b.kv_indices) and a.kv_indices.dtype == torch.int32
    contiguous = build_step(p, StepInput(q, seq_t, table.contiguous(), nd, seq_lens_cpu=seq_t.clone()))
    assert torch.equal(contiguous.slots, small.slots) and contiguous.slots.dtype == torch.int64


"""The adapter's plumbing on the CPU, through the pure-torch reference backend: paged layouts,
indptrs and slots, KV views, GQA, sliding window, soft cap, speculative decode shapes, mixed
batches, and MLA chunked prefill with the seed-004 merge. Expected values come from a naive
float64 attention over the K/V the test itself keeps, not from anything read back from pages."""

from __future__ import annotations

import math

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")

from attnplan.adapter import AttentionExecutor, StepInput, merge_states  # noqa: E402
from attnplan.adapter import kv_cache as kvc  # noqa: E402


def naive(q, k, v, *, scale, causal=True, window=None, cap=None):
    """q [n, Hq, D], k/v [L, Hk, *] -> [n, Hq, Dv]; queries are the last n positions."""
    n, hq, _ = q.shape
    L, hk = k.shape[:2]
    out = torch.zeros(n, hq, v.shape[-1], dtype=torch.float64)
    for i in range(n):
        pos = L - n + i
        for h in range(hq):
            kh = h // (hq // hk)
            keys = [j for j in range(L) if (not causal or j <= pos) and (window is None or pos - j < window)]
            s = torch.stack([(q[i, h].double() * k[j, kh].double()).sum() * scale for j in keys])
            if cap:
                s = cap * torch.tanh(s / cap)
            p = torch.softmax(s, 0)
            out[i, h] = sum(p[t] * v[j, kh].double() for t, j in enumerate(keys))
    return out


def slots_of(table, r, positions, page):
    return torch.tensor([int(table[r, p // page]) * page + p % page for p in positions])


def run_standard(node, cfg_kw, q_lens, seq, nd, seed=0, k_scale=1.0, engine=None):
    cfg = AttentionConfig(**cfg_kw)
    answer = plan_for(cfg, simulated_node(node, cubins="available") if node == "B200" else simulated_node(node),
                      engine=engine)
    assert answer.ok, answer.violations
    ex = AttentionExecutor(answer, device="cpu", backend="reference")
    plan = ex.plan
    page, hk, d = plan.kv_cache.page_size, cfg.kv_heads, cfg.head_dim
    gen = torch.Generator().manual_seed(seed)
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, generator=gen).view(len(seq), width).int()
    cache = ex.allocate_kv_cache(len(seq) * width)
    cache.data.fill_(0x7F if cache.data.dtype == torch.uint8 else float("nan"))   # NaN everywhere unwritten
    ks = [torch.randn(s, hk, d, generator=gen).bfloat16() for s in seq]
    vs = [torch.randn(s, hk, d, generator=gen).bfloat16() for s in seq]
    # Earlier steps wrote the context (independent slot arithmetic).
    for r, (s, n) in enumerate(zip(seq, q_lens)):
        if s > n:
            kvc.append(cache, slots_of(table, r, range(s - n), page), ks[r][: s - n], vs[r][: s - n],
                       k_scale=k_scale, v_scale=k_scale)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    step = ex.plan_step(StepInput(query_lens=q_lens, seq_lens=seq_t, block_table=table, num_decodes=nd,
                                  seq_lens_cpu=seq_t))
    ex.append_kv(step, cache, torch.cat([k[s - n:] for k, s, n in zip(ks, seq, q_lens)]),
                 torch.cat([v[s - n:] for v, s, n in zip(vs, seq, q_lens)]), k_scale=k_scale, v_scale=k_scale)
    q = torch.randn(sum(q_lens), cfg.num_qo_heads, d, generator=gen).bfloat16()
    out = torch.full((sum(q_lens), cfg.num_qo_heads, d), float("nan"), dtype=torch.bfloat16)
    ex.forward(step, q, cache, out, k_scale=k_scale, v_scale=k_scale)
    assert not out.isnan().any(), "every output row is written"
    view = plan.kv_cache.kv_view_dtype
    rnd = (lambda x: (x.float() / k_scale).to(getattr(torch, view)).float() * k_scale) if "float8" in view else (lambda x: x)
    # The query each phase runs with (vLLM quantizes it to fp8 over an fp8 cache on 9.0/10.x: issue 21).
    qdt = {ph: getattr(plan, ph).query_dtype for ph in ("prefill", "decode")}
    rq = {ph: (lambda x, w=w: x.float().to(getattr(torch, w)).float()) if "float8" in w else (lambda x: x)
          for ph, w in qdt.items()}
    expect, t = [], 0
    for r, (s, n) in enumerate(zip(seq, q_lens)):
        expect.append(naive(rq["decode" if r < nd else "prefill"](q[t:t + n]), rnd(ks[r]), rnd(vs[r]), scale=1 / math.sqrt(d),
                            window=cfg.sliding_window, cap=cfg.logits_soft_cap))
        t += n
    expect = torch.cat(expect)
    err = ((out.double() - expect).norm() / expect.norm()).item()
    assert err < 1e-2, err
    return out, expect


MIXED = dict(q_lens=[1, 1, 1, 9, 4], seq=[1, 17, 40, 9, 37], nd=3)      # decodes, fresh prefill, chunked prefill


@pytest.mark.parametrize("group", [1, 4, 8])
def test_gqa_groups_mixed_batch(group):
    run_standard("H100", dict(head_dim=64, num_qo_heads=2 * group, num_kv_heads=2), **MIXED)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_head_dims(head_dim):
    run_standard("H100", dict(head_dim=head_dim, num_qo_heads=4, num_kv_heads=2), q_lens=[1, 6], seq=[20, 30], nd=1)


def test_hnd_layout_trtllm_plan():
    run_standard("B200", dict(head_dim=64, num_qo_heads=8, num_kv_heads=2), **MIXED)


@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
def test_fp8_views(kv):
    # fp8: vLLM's plan (fp8 prefill query on fa3, bf16 XQA decode query); e5m2: the kernel layer's, since the
    # vLLM layer refuses it on 9.0 (its static XQA decode reads no e5m2: oracle exception kernel.xqa-e5m2)
    run_standard("H100", dict(head_dim=64, num_qo_heads=8, num_kv_heads=2, kv_cache_dtype=kv), **MIXED, k_scale=0.25,
                 engine=None if kv == "fp8" else "flashinfer")


@pytest.mark.parametrize("spec", [1, 2, 3])
def test_speculative_decode_shapes(spec):
    q = 1 + spec
    run_standard("H100", dict(head_dim=64, num_qo_heads=8, num_kv_heads=2, num_speculative_tokens=spec),
                 q_lens=[q, q, 5], seq=[q, 21, 30], nd=2)


def test_sliding_window_and_soft_cap():
    # vLLM 0.33 would drop the soft cap on XQA decode (vllm.softcap-dropped): the kernel layer's plan (fa2 both phases)
    run_standard("H100", dict(head_dim=64, num_qo_heads=8, num_kv_heads=2, sliding_window=7, logits_soft_cap=5.0), **MIXED,
                 engine="flashinfer")


def test_sliding_window_ignores_keys_outside_it():
    cfg = dict(head_dim=64, num_qo_heads=4, num_kv_heads=2, sliding_window=5)
    a, _ = run_standard("H100", cfg, q_lens=[1], seq=[30], nd=1, seed=3)
    b, full = run_standard("H100", dict(cfg, sliding_window=None), q_lens=[1], seq=[30], nd=1, seed=3)
    assert not torch.allclose(a.float(), b.float(), atol=1e-3)


# -- MLA ----------------------------------------------------------------------------------------
MLA = dict(num_qo_heads=4, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def mla_executor(**kw):
    # vLLM 0.33 has no FlashInfer MLA on 9.0 (vllm.mla-backend): FlashInfer's own plan
    answer = plan_for(AttentionConfig(**MLA, **kw), simulated_node("H100"), engine="flashinfer")
    assert answer.ok and answer.backends() == ("fa3", "fa3-mla")
    return AttentionExecutor(answer, device="cpu", backend="reference")


@pytest.mark.parametrize("spec", [0, 1])
def test_mla_decode_matches_naive(spec):
    ex = mla_executor(num_speculative_tokens=spec)
    q_len = 1 + spec
    seq = [3, 40]
    page = ex.plan.kv_cache.page_size
    gen = torch.Generator().manual_seed(1)
    width = 3
    table = torch.randperm(6, generator=gen).view(2, 3).int()
    cache = ex.allocate_kv_cache(6)
    latent = [torch.randn(s, 576, generator=gen).bfloat16() for s in seq]
    for r, s in enumerate(seq):
        kvc.append(cache, slots_of(table, r, range(s), page), latent[r])
    seq_t = torch.tensor(seq, dtype=torch.int32)
    step = ex.plan_step(StepInput([q_len, q_len], seq_t, table, 2, seq_lens_cpu=seq_t))
    q_nope = torch.randn(2 * q_len, 4, 512, generator=gen).bfloat16()
    q_pe = torch.randn(2 * q_len, 4, 64, generator=gen).bfloat16()
    out = ex.mla_decode(step, q_nope, q_pe, cache, torch.full((2 * q_len, 4, 512), float("nan"), dtype=torch.bfloat16))
    expect = torch.cat([naive(torch.cat([q_nope, q_pe], -1)[r * q_len:(r + 1) * q_len], latent[r].unsqueeze(1),
                              latent[r][:, :512].unsqueeze(1), scale=1 / math.sqrt(192)) for r in range(2)])
    assert ((out.double() - expect).norm() / expect.norm()) < 1e-2
    del width


def mla_chunked(ex, poison_context_rows=False):
    """Two prefill requests: one with 24 cached tokens, one with none."""
    page = ex.plan.kv_cache.page_size
    gen = torch.Generator().manual_seed(2)
    ctx, new = [24, 0], [5, 7]
    seq = [c + n for c, n in zip(ctx, new)]
    table = torch.arange(8).view(2, 4).int()
    cache = ex.allocate_kv_cache(8)
    lat = torch.randn(24, 576, generator=gen).bfloat16()
    kvc.append(cache, slots_of(table, 0, range(24), page), lat)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    step = ex.plan_step(StepInput(new, seq_t, table, 0, seq_lens_cpu=seq_t))
    assert step.extra["context_indptr_cpu"].tolist() == [0, 24, 24]
    # Decompression (kv_b_proj) is the model's: a fixed random projection stands in for it.
    w_k = torch.randn(512, 4, 128, generator=gen) / 20
    w_v = torch.randn(512, 4, 128, generator=gen) / 20
    got = ex.gather_context(step, cache)
    assert torch.equal(got, lat)
    # another layer's cache: the step's context slots are worked out once, each layer gathers its own rows
    other = ex.allocate_kv_cache(8)
    lat2 = torch.randn(24, 576, generator=gen).bfloat16()
    kvc.append(other, slots_of(table, 0, range(24), page), lat2)
    assert torch.equal(ex.gather_context(step, other), lat2) and "context_slots" in step.extra

    def up(latent):
        ckv = latent[:, :512].float()
        k_nope = torch.einsum("tc,chd->thd", ckv, w_k)
        k = torch.cat([k_nope, latent[:, 512:].float().unsqueeze(1).expand(-1, 4, -1)], -1)
        return k.bfloat16(), torch.einsum("tc,chd->thd", ckv, w_v).bfloat16()

    k_ctx, v_ctx = up(got)
    q = torch.randn(12, 4, 192, generator=gen).bfloat16()
    k_new = torch.randn(12, 4, 192, generator=gen).bfloat16()
    v_new = torch.randn(12, 4, 128, generator=gen).bfloat16()
    if poison_context_rows:
        # A context kernel that writes only rows that have context (vLLM #36540): the rest is NaN.
        inner = ex.backend.run_ragged

        def run_ragged(step, key, q_, k_, v_, out, lse):
            inner(step, key, q_, k_, v_, out, lse)
            if key == "context":
                out[5:] = float("nan")
                lse[5:] = float("nan")
        ex.backend.run_ragged = run_ragged
    out = torch.full((12, 4, 128), float("nan"), dtype=torch.bfloat16)
    ex.mla_prefill(step, q, k_new, v_new, out, context=(k_ctx, v_ctx))
    expect0 = naive(q[:5], torch.cat([k_ctx, k_new[:5]]), torch.cat([v_ctx, v_new[:5]]), scale=1 / math.sqrt(192))
    only_new = torch.full_like(out, float("nan"))
    step2 = ex.plan_step(StepInput([7], torch.tensor([7], dtype=torch.int32), table[1:], 0,
                                   seq_lens_cpu=torch.tensor([7], dtype=torch.int32)))
    ex.mla_prefill(step2, q[5:], k_new[5:], v_new[5:], only_new[5:])
    return out, expect0, only_new


def test_mla_chunked_prefill_merges_context_and_passes_the_rest_unchanged():
    ex = mla_executor()
    out, expect0, only_new = mla_chunked(ex)
    assert not out.isnan().any()
    assert ((out[:5].double() - expect0).norm() / expect0.norm()) < 1e-2
    assert torch.equal(out[5:], only_new[5:]), "tokens without context take the new-token result bit for bit"


def test_merge_never_reads_rows_the_context_kernel_left_unwritten():
    ex = mla_executor()
    out, expect0, only_new = mla_chunked(ex, poison_context_rows=True)
    assert not out.isnan().any()
    assert torch.equal(out[5:], only_new[5:])


def test_mla_prefill_without_context_needs_none():
    ex = mla_executor()
    seq_t = torch.tensor([4], dtype=torch.int32)
    step = ex.plan_step(StepInput([4], seq_t, torch.zeros(1, 1, dtype=torch.int32), 0, seq_lens_cpu=seq_t))
    assert not step.extra["any_context"] and step.extra["has_context"] is None
    # an engine that gathers every step's context gets none (the step brought no context parts)
    cache = ex.allocate_kv_cache(1)
    got = ex.gather_context(step, cache)
    assert got.shape == (0, ex.plan.kv_cache.head_dim_k) and got.dtype == cache.kernel_view().dtype
    out = ex.mla_prefill(step, torch.randn(4, 4, 192).bfloat16(), torch.randn(4, 4, 192).bfloat16(),
                         torch.randn(4, 4, 128).bfloat16(), context=(got, got))
    assert not out.isnan().any()


def test_merge_states_is_attention_over_the_union():
    gen = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(3, 2, 16, generator=gen), torch.randn(20, 2, 16, generator=gen), torch.randn(20, 2, 16, generator=gen)
    from attnplan.adapter import attention_ref

    full, s_full = attention_ref(q, k, v, sm_scale=0.25, causal=False)
    a, s_a = attention_ref(q, k[:7], v[:7], sm_scale=0.25, causal=False)
    b, s_b = attention_ref(q, k[7:], v[7:], sm_scale=0.25, causal=False)
    m, s_m = merge_states(a, s_a, b, s_b)
    assert torch.allclose(m, full, atol=1e-5) and torch.allclose(s_m, s_full, atol=1e-5)
    # An empty segment (-inf LSE) leaves the other unchanged.
    e, s_e = merge_states(a, s_a, torch.zeros_like(a), torch.full_like(s_a, -math.inf))
    assert torch.allclose(e, a) and torch.allclose(s_e, s_a)


@pytest.mark.parametrize("cfg", [dict(head_dim=64, num_qo_heads=8, num_kv_heads=2, num_speculative_tokens=2), MLA])
def test_warmup_runs_every_batch_kind(cfg):
    engine = "flashinfer" if "kv_lora_rank" in cfg else None   # no FlashInfer MLA in vLLM 0.33 on 9.0
    ex = AttentionExecutor(plan_for(AttentionConfig(**cfg), simulated_node("H100"), engine=engine), device="cpu",
                           backend="reference")
    events = []
    report = ex.warmup(progress=events.append)
    assert list(report.batch_kinds) == ["prefill_only", "decode_only", "mixed"]
    assert events[-1]["event"] == "done" and not report.compiled_during_exercise
    # the summary says how the host works out prefill / mixed metadata (host_native.py), and why not C
    from attnplan.adapter import host_native

    st = host_native.status()
    want = f"host_step.c ({st['path']})" if st["compiled"] else f"numpy ({st['why']})"
    assert report.host_metadata == want and report.summary().endswith(f"host metadata: {want}")


@pytest.mark.parametrize("heads,head_dim,elem,expect", [(64, 128, 2, 1), (128, 128, 2, 2), (128, 512, 2, 4),
                                                         (16, 128, 4, 1), (128, 128, 4, 4), (3, 64, 2, 1)])
def test_fold_heads_fits_flashinfer_merge_block(heads, head_dim, elem, expect):
    from attnplan.adapter.merge import fold_heads

    f = fold_heads(heads, head_dim, elem)
    assert f == expect
    vec = max(16 // elem, head_dim // 32)
    assert heads % f == 0 and (heads // f) * (head_dim // vec) <= 1024


def test_merge_over_folded_heads_equals_unfolded():
    """The view the FlashInfer backend hands the merge kernel for 128 heads ([T*f, H/f, D], the
    mask repeated f times) merges exactly what the unfolded state would."""
    from attnplan.adapter.merge import fold_heads, merge_context_into

    gen = torch.Generator().manual_seed(11)
    t, h, d = 6, 128, 128
    out, ctx = torch.randn(t, h, d, generator=gen), torch.randn(t, h, d, generator=gen)
    lse, s_ctx = torch.randn(t, h, generator=gen), torch.randn(t, h, generator=gen)
    mask = torch.tensor([True, False, True, True, False, True])
    plain_out, plain_lse = out.clone(), lse.clone()
    merge_context_into(plain_out, plain_lse, ctx, s_ctx, mask)
    f = fold_heads(h, d, 2)
    assert f == 2
    folded_out, folded_lse = out.clone(), lse.clone()
    merge_context_into(folded_out.view(t * f, h // f, d), folded_lse.view(t * f, h // f),
                       ctx.reshape(t * f, h // f, d), s_ctx.reshape(t * f, h // f), mask.repeat_interleave(f))
    assert torch.equal(folded_out, plain_out) and torch.equal(folded_lse, plain_lse)
    assert torch.equal(folded_out[1], out[1]) and not torch.equal(folded_out[0], out[0])


def test_flashinfer_merge_folds_a_steps_mask_once(monkeypatch):
    """FlashInferBackend.merge hands the kernel the step's mask repeated once per head group, and makes
    that repeat once a step: every layer of a step passes the same mask, a new step a new one."""
    flashinfer = pytest.importorskip("flashinfer")
    from attnplan.adapter.flashinfer_backend import FlashInferBackend
    from attnplan.adapter.merge import fold_heads, merge_context_into

    seen = []

    def merge_state_in_place(out, lse, v, s, mask=None):
        seen.append(mask)
        merge_context_into(out, lse, v, s, mask.bool())
    monkeypatch.setattr(flashinfer, "merge_state_in_place", merge_state_in_place)
    backend = object.__new__(FlashInferBackend)      # merge reads no plan state: no wrappers, no device
    backend._folded = None
    gen = torch.Generator().manual_seed(5)
    t, h, d = 5, 128, 128
    f = fold_heads(h, d, 4)
    assert f > 1

    def layer(mask):
        out, ctx = torch.randn(t, h, d, generator=gen), torch.randn(t, h, d, generator=gen)
        lse, s_ctx = torch.randn(t, h, generator=gen), torch.randn(t, h, generator=gen)
        want_out, want_lse = out.clone(), lse.clone()
        merge_context_into(want_out, want_lse, ctx, s_ctx, mask)
        backend.merge(out, lse, ctx, s_ctx, mask)
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)

    step1 = torch.tensor([True, False, True, False, True])
    for _ in range(3):
        layer(step1)
    assert seen[0] is seen[1] is seen[2]
    assert torch.equal(seen[0], step1.to(torch.uint8).repeat_interleave(f))
    step2 = torch.tensor([False, True, True, False, False])     # the next step's mask: folded anew
    layer(step2)
    assert seen[3] is not seen[0] and torch.equal(seen[3], step2.to(torch.uint8).repeat_interleave(f))

"""MLA through the adapter on a real GPU: paged latent decode (BatchMLAPagedAttentionWrapper) and
ragged prefill with (qk, vo) = (192, 128), on the plan the rules choose here and on fa2 forced,
vs the float32 reference; chunked-context prefill with the seed-004 merge (flashinfer.merge_state)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import (TOL, answer, chunked_prefill_ref, executor, no_device_sync, prebuild, random_lens,  # noqa: E402
                        rel_err, settled_memory, up_projection)

from attnplan.policy import AttentionConfig, PlanMismatchError, plan_for, simulated_node  # noqa: E402

from attnplan.adapter import AttentionExecutor, StepInput, attention_ref  # noqa: E402
from attnplan.adapter import kv_cache as kvc  # noqa: E402

pytestmark = pytest.mark.gpu

MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
AUTO, FA2, MTP = MLA, dict(MLA, attention_backend="fa2"), dict(MLA, num_speculative_tokens=1)
CASES = {"auto": AUTO, "fa2": FA2}
GEN = torch.Generator(device="cuda").manual_seed(int.from_bytes(__import__("os").urandom(4), "little"))


def rnd(*shape):
    return torch.randn(*shape, device="cuda", generator=GEN).to(torch.bfloat16)


@pytest.fixture(scope="module", autouse=True)
def built():
    prebuild(*(answer(**c) for c in (AUTO, FA2, MTP)))


def paged(ex, seq, new):
    """Random latent history in shuffled pages; returns (table, cache, latents, StepInput)."""
    page = ex.plan.kv_cache.page_size
    width = max((s + page - 1) // page for s in seq)
    table = torch.randperm(len(seq) * width, device="cuda", generator=GEN).view(len(seq), width).int()
    cache = ex.allocate_kv_cache(len(seq) * width)
    cache.data.fill_(float("nan"))
    lat = [rnd(s, 576) for s in seq]
    for r, (s, n) in enumerate(zip(seq, new)):
        if s > n:
            pos = torch.arange(s - n, device="cuda")
            kvc.append(cache, table[r, pos // page].long() * page + pos % page, lat[r][: s - n])
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return table, cache, lat, StepInput(new, seq_t.cuda(), table, 0, seq_lens_cpu=seq_t)


@pytest.mark.parametrize("name", ["auto", "fa2", "mtp"])
def test_mla_decode(name):
    ex = executor(**{"auto": AUTO, "fa2": FA2, "mtp": MTP}[name])
    qd = ex.plan.decode.q_len_per_req
    seq = random_lens(12, qd, 3000)
    table, cache, lat, inp = paged(ex, seq, [qd] * 12)
    inp.num_decodes = 12
    step = ex.plan_step(inp)
    ex.append_latent(step, cache, torch.cat([x[s - qd:] for x, s in zip(lat, seq)]))
    q_nope, q_pe = rnd(12 * qd, 16, 512), rnd(12 * qd, 16, 64)
    out = torch.full((12 * qd, 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    ex.mla_decode(step, q_nope, q_pe, cache, out)
    q = torch.cat([q_nope, q_pe], -1)
    ref = torch.cat([attention_ref(q[r * qd:(r + 1) * qd], lat[r].unsqueeze(1), lat[r][:, :512].unsqueeze(1),
                                   sm_scale=ex.params.sm_scale)[0] for r in range(12)])
    err = rel_err(out, ref)
    print(f"MLA decode {ex.plan.decode.kernel} q_len={qd}: rel err {err:.2e}")
    assert err <= TOL


@pytest.mark.parametrize("heads", [16, 128])      # 128: DeepSeek-V3 at TP 1, past one merge block
@pytest.mark.parametrize("name", ["auto", "fa2"])
def test_mla_chunked_prefill_with_merge(name, heads):
    ex = executor(**dict(CASES[name], num_qo_heads=heads))
    new = random_lens(4, 1, 600)
    ctx = [0, random_lens(1, 1, 2000)[0], 0, random_lens(1, 1, 2000)[0]]
    seq = [a + b for a, b in zip(new, ctx)]
    table, cache, lat, inp = paged(ex, seq, new)
    step = ex.plan_step(inp)
    ex.append_latent(step, cache, torch.cat([x[s - n:] for x, s, n in zip(lat, seq, new)]))
    latent_ctx = ex.gather_context(step, cache)
    assert torch.equal(latent_ctx, torch.cat([x[:c] for x, c in zip(lat, ctx)]))
    up = up_projection(heads, rnd)
    k_ctx, v_ctx = up(latent_ctx)
    t = sum(new)
    q, k_new, v_new = rnd(t, heads, 192), rnd(t, heads, 192), rnd(t, heads, 128)
    # Capture the new-token result just before the merge, and poison the context rows of tokens
    # without context (the kernel may leave them unwritten): neither may reach the output.
    seen = {}
    inner_ragged, inner_merge = ex.backend.run_ragged, ex.backend.merge

    def run_ragged(step_, key, *a):
        inner_ragged(step_, key, *a)
        if key == "context":
            a[3][~step_.extra["has_context"]] = float("nan")
    def merge(out, lse, v, s, has):
        seen["before"] = out.clone()
        inner_merge(out, lse, v, s, has)
    ex.backend.run_ragged, ex.backend.merge = run_ragged, merge
    out = torch.full((t, heads, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
    ex.mla_prefill(step, q, k_new, v_new, out, context=(k_ctx, v_ctx))
    torch.cuda.synchronize()
    err = rel_err(out, chunked_prefill_ref(q, k_new, v_new, k_ctx, v_ctx, new, ctx, ex.params.sm_scale))
    no_ctx = ~step.extra["has_context"]
    print(f"MLA chunked prefill {ex.answer.backends()} heads={heads} new={new} ctx={ctx}: rel err {err:.2e}")
    assert err <= TOL
    assert torch.equal(out[no_ctx], seen["before"][no_ctx]), "tokens without context pass unchanged"


def test_mla_steps_do_no_device_to_host_sync():
    ex = executor(**AUTO)
    new = [1, 1, 40, 7]
    seq = [300, 900, 40, 500]
    table, cache, lat, inp = paged(ex, seq, new)
    inp.num_decodes = 2
    up = up_projection(16, rnd)

    def one_step():
        step = ex.plan_step(inp)
        ex.append_latent(step, cache, torch.cat([x[s - n:] for x, s, n in zip(lat, seq, new)]))
        ex.mla_decode(step, rnd(2, 16, 512), rnd(2, 16, 64), cache)
        k_ctx, v_ctx = up(ex.gather_context(step, cache))
        return ex.mla_prefill(step, rnd(47, 16, 192), rnd(47, 16, 192), rnd(47, 16, 128), context=(k_ctx, v_ctx))

    one_step()
    with no_device_sync():
        out = one_step()
    assert not out.isnan().any()


def test_trtllm_mla_plan_refused_here():
    # kernel truth: vLLM 0.33's own pick on B200 prefills with FLASH_ATTN, which the adapter refuses by the
    # engine's name before any rule (startup.refuse_foreign_engine_backend)
    b200 = plan_for(AttentionConfig(**MLA), simulated_node("B200", cubins="available"), engine="flashinfer")
    assert b200.backends() == ("trtllm-ragged", "trtllm-gen-mla")
    before = settled_memory()
    with pytest.raises(PlanMismatchError) as err:
        AttentionExecutor(b200)
    rules = {v.rule for v in err.value.violations}
    print("refused:", sorted(rules))
    assert "mla.family" in rules and (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) == before


def test_mla_warmup_covers_every_kernel():
    from attnplan.adapter.warmup import _built, _jit_dir

    ex = executor(**AUTO)
    before = _built(_jit_dir())          # the module fixture built all of them already
    report = ex.warmup()
    print(report.summary())
    assert report.compiled_during_exercise == []
    assert _built(_jit_dir()) == before, "warm-up rebuilt a module that was already built"

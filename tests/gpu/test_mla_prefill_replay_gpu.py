"""MLA prefill's ragged parts planned with FlashInfer's scheduler call alone once learned from each part's
wrapper and checked on it (issue 41; general_plans.py ``plan_part``, step.RaggedPart): 12 chunked-prefill
steps of changing request counts, query and context lengths through one executor, each against the float32
reference (the new tokens over their context and themselves, merged as in seed 004), and then each part's
wrapper has replayed. The test opens ``RaggedPrefill.general_replay`` for its own executor's backend; the call
opens it for a backend once this has passed on the H100 (fa2 and fa3: bench/logs/h100-2026-11-27u/call2)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import SEED, TOL, answer, chunked_prefill_ref, executor, rel_err, up_projection  # noqa: E402

from attnplan.adapter import StepInput  # noqa: E402
from attnplan.adapter import kv_cache as kvc  # noqa: E402
from attnplan.adapter.general_plans import replay_of  # noqa: E402

pytestmark = pytest.mark.gpu

MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
BACKENDS = ("fa2", "fa3")
GEN = torch.Generator(device="cuda").manual_seed(SEED)


def rnd(*shape):
    return torch.randn(*shape, device="cuda", generator=GEN).to(torch.bfloat16)


@pytest.fixture(scope="module", autouse=True)
def built():
    from attnplan.adapter.warmup import plan_modules, prebuild

    # both backends' prefill modules in one build (ninja_builds.py): fa3's alone takes minutes
    prebuild([m for b in BACKENDS for m in plan_modules(answer(**MLA, attention_backend=b).plan)
              if m.phase == "prefill"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_mla_prefill_parts_replay_the_scheduler_and_match_the_reference(monkeypatch, backend):
    from attnplan.adapter.calls import registry

    monkeypatch.setattr(registry()["ragged_prefill"], "general_replay", lambda pp: pp.flashinfer_backend == backend)
    ex = executor(**MLA, attention_backend=backend)
    assert ex.backend.replays_ragged()
    assert ex.plan.prefill.call == "ragged_prefill" and ex.plan.prefill.flashinfer_backend == backend
    page = ex.plan.kv_cache.page_size
    rng = random.Random(SEED)
    up = up_projection(16, rnd)
    worst = 0.0
    for i in range(12):
        n = rng.randint(1, 5)
        new = [rng.randint(1, 300) for _ in range(n)]
        ctx = [rng.choice([0, rng.randint(1, 1500)]) for _ in range(n)]
        if i % 3 == 0:
            ctx[0] = max(ctx[0], 1)                  # the context part every few steps at least
        seq = [a + b for a, b in zip(new, ctx)]
        width = max((s + page - 1) // page for s in seq)
        table = torch.randperm(n * width, device="cuda", generator=GEN).view(n, width).int()
        cache = ex.allocate_kv_cache(n * width)
        lat = [rnd(s, 576) for s in seq]
        for r, c in enumerate(ctx):
            if c:
                pos = torch.arange(c, device="cuda")
                kvc.append(cache, table[r, pos // page].long() * page + pos % page, lat[r][:c])
        seq_t = torch.tensor(seq, dtype=torch.int32)
        step = ex.plan_step(StepInput(new, seq_t.cuda(), table, 0, seq_lens_cpu=seq_t))
        ex.append_latent(step, cache, torch.cat([x[c:] for x, c in zip(lat, ctx)]))
        latent_ctx = ex.gather_context(step, cache)
        k_ctx, v_ctx = up(latent_ctx)
        t = sum(new)
        q, k_new, v_new = rnd(t, 16, 192), rnd(t, 16, 192), rnd(t, 16, 128)
        out = torch.full((t, 16, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
        ex.mla_prefill(step, q, k_new, v_new, out, context=(k_ctx, v_ctx))
        err = rel_err(out, chunked_prefill_ref(q, k_new, v_new, k_ctx, v_ctx, new, ctx, ex.params.sm_scale))
        worst = max(worst, err)
        assert err <= TOL, (i, new, ctx, err)
    got = {key: replay_of(ex.backend, ex.backend.parts[key]) for key in ("new", "context")}
    print(f"MLA prefill {backend}, 12 steps: worst rel err {worst:.2e}; "
          + "; ".join(f"{k}: replays {r.replays}, whole {r.whole_steps}, narrowed {r.narrowed}, refused {r.refused}"
                      for k, r in got.items()))
    for key, r in got.items():
        assert r.ready and r.replays > 0, (key, r.refused)

"""Per-shape decode choice on the GPU (issue 41 item 3): the rules' own --engine flashinfer plan on this
node carries two decode calls and a measured boundary (plan.decode_choice); through the adapter, the call
it picks on each side of the boundary - and each call forced, on the same batches - agrees with the
float32 reference over what the cache holds. Skipped where this GPU has no measured boundary."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, Batch, NoRealPlan, executor_for, plan_or_raise, random_lens, rel_err  # noqa: E402

from attnplan.adapter.calls import batch_pages, decode_phases  # noqa: E402
from attnplan.adapter.warmup import plan_modules, prebuild  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, page_size=16)


@pytest.fixture(scope="module")
def ex():
    try:
        a = plan_or_raise(LLAMA, "flashinfer", lambda a: a.plan.decode_choice is not None,
                          "a per-shape decode choice (rules/decode_choice.yaml)")
    except NoRealPlan as exc:
        pytest.skip(f"no measured decode choice on this GPU: {exc}")
    # both decode calls' modules (the decode phase lists them: policy/plan.py build_plan), one ninja; the
    # prefill module (fa3 on 9.0, minutes to build) only where a test needs it (warm-up below)
    prebuild([m for m in plan_modules(a.plan) if m.phase == "decode"])
    return executor_for(a)


def test_warmup_runs_both_decode_calls(ex):
    report = ex.warmup()
    # both decode calls built before the first request, and each ran one step in warm-up
    assert not report.compiled_during_exercise, report.compiled_during_exercise
    assert {f"decode_only:{pp.call}" for pp in decode_phases(ex.plan)} <= set(report.batch_kinds)


def _shapes(ex):
    """Decode batches on both sides of the boundary, in pages: (q_lens, seq, num_decodes). (Mixed steps take
    the same pick from the host metadata's page count: tests/test_decode_per_shape.py.)"""
    page = ex.plan.kv_cache.page_size
    edge = ex.plan.decode_choice.small_up_to_kv_tokens // page          # pages
    ctx = 4096
    at_edge = edge * page // ctx                                       # requests of ctx tokens filling the edge
    return [
        ([1] * 3, random_lens(3, 20, 900), 3),                           # far below
        ([1] * at_edge, [ctx] * at_edge, at_edge),                       # exactly the boundary: small
        ([1] * (at_edge + 1), [ctx] * (at_edge + 1), at_edge + 1),       # one request over: large
        ([1] * 6, random_lens(6, 3 * ctx, 5 * ctx), 6),                  # well above
        ([1] * 40, random_lens(40, 100, 400), 40),                      # many short requests: small
    ]


@pytest.mark.parametrize("i", range(5))
def test_each_decode_call_and_the_pick_agree_with_the_reference(ex, i):
    q_lens, seq, nd = _shapes(ex)[i]
    page = ex.plan.kv_cache.page_size
    b = Batch(ex, q_lens, seq, nd, poison="finite")        # XQA reads last-page tails: finite garbage there
    step = ex.plan_step(b.input)
    picked = step.extra["decode_context"].plan.decode.call
    pages = sum(-(-s // page) for s in seq[:nd])
    assert batch_pages(step.decode, page) == pages
    assert picked == ex.decode_call_for(pages).call
    ref = b.reference()
    errs = {"picked": rel_err(b.run(), ref)}
    for index, pp in enumerate(decode_phases(ex.plan)):
        with ex.backend.forced_decode(index):
            errs[pp.call] = rel_err(b.run(), ref)
    print(f"[decode choice] shape {i}: {nd} decodes, {pages} pages, picked {picked}: {errs}")
    assert all(e < TOL for e in errs.values()), errs


def test_the_pick_switches_across_the_boundary(ex):
    page = ex.plan.kv_cache.page_size
    choice = ex.plan.decode_choice
    edge = choice.small_up_to_kv_tokens // page
    small, large = ex.decode_call_for(edge), ex.decode_call_for(edge + 1)
    assert (small.backend, large.backend) == (choice.small, choice.large)

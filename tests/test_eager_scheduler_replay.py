"""Eager decode steps of a repeated shape plan through a wrapper of their layout's own, with
FlashInfer's scheduler alone once checked (issue 41; attnplan/adapter/eager_plans.py, host_plan.py).

Held on the CPU with the real executor (``plan_step``: the shape's cache, the backend's plan and
``run_decode``), with FlashInfer's wrappers replaced by the stand-ins of tests/graph_stand_ins.py,
whose scheduler writes a schedule computed from the host arrays it is handed. Every step checks
that the wrapper the step runs on holds that step's schedule, whichever way it was planned. On the
H100 the same path runs against the float32 reference in tests/gpu/test_steady_step_gpu.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flashinfer")

from attnplan.adapter import StepInput  # noqa: E402
from attnplan.adapter.eager_plans import EagerPlans  # noqa: E402
from graph_stand_ins import (MlaWrapper, PagedWrapper, advancing, executor, page_indptr, schedule_of,  # noqa: E402
                             workspace)

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def _input(seq, table, persistent=None):
    """A decode-only step's input; ``persistent``: the caller's (seq_lens, table) rewritten in place
    (an engine's buffers), else new tensors each step."""
    t = torch.tensor(seq, dtype=torch.int32)
    if persistent is not None:
        persistent[0].copy_(t)
        return StepInput([1] * len(seq), persistent[0], persistent[1], len(seq), seq_lens_cpu=t)
    return StepInput([1] * len(seq), t, table.clone(), len(seq), seq_lens_cpu=t)


def _steps(ex, page, steps, width=16, persistent=False):
    """Plan and run every step; each step's wrapper holds its schedule. Returns what each step ran on."""
    b = len(steps[0])
    table = torch.arange(b * width, dtype=torch.int32).view(b, width)
    keep = (torch.zeros(b, dtype=torch.int32), table.clone()) if persistent else None
    ran = []
    for seq in steps:
        step = ex.plan_step(_input(seq, table, keep))
        w = step.extra.get("decode_wrapper", ex.backend._decode)
        want = schedule_of(page_indptr(seq, page), seq)
        assert workspace(w, len(want)) == want, seq
        before = getattr(w, "runs", 0)
        if ex.plan.kv_cache.mla:
            ex.backend.run_mla_decode(step, None, None, ex.allocate_kv_cache(1), None)
        else:
            ex.backend.run_decode(step, None, ex.allocate_kv_cache(1), None)
        assert w.runs == before + 1                    # the step ran on the wrapper that planned it
        ran.append(step.extra.get("decode_wrapper"))
    return ran


@pytest.mark.parametrize("backend", ["fa2", "fa3"])
def test_a_repeated_shape_gets_its_own_wrapper_and_then_plans_with_the_scheduler_alone(monkeypatch, backend):
    ex, page = executor(monkeypatch, PagedWrapper, LLAMA, backend)
    steps = advancing([14, 30], 3 * page)
    ran = _steps(ex, page, steps)
    after = EagerPlans.AFTER
    # the first steps of a layout plan the backend's wrapper; then the layout's own, every step
    assert ran[:after - 1] == [None] * (after - 1)
    own = ran[after - 1]
    assert own is not None and own is not ex.backend._decode and all(w is own for w in ran[after - 1:])
    hp = ex._layouts.shape(2, 1, 16).own.planners[0]
    assert hp.wrapper is own and hp.scheduler.ready, hp.scheduler.refused
    # its first plan whole (+ the check's), the rest the scheduler call alone; a shared workspace
    assert hp.scheduler.replays == len(steps) - after
    assert own.whole_plans == 4
    assert hp.shared and own._int_workspace_buffer is ex.backend.eager._workspace()[0]
    assert ex.backend._decode.whole_plans == after - 1


def test_two_shapes_share_one_workspace_and_each_step_holds_its_own_schedule(monkeypatch):
    ex, page = executor(monkeypatch, PagedWrapper, LLAMA, "fa2")
    a, b = advancing([14, 30], 12), advancing([5, 60, 90], 12)
    ran_a, ran_b = [], []
    for i in range(12):                 # interleaved: each plan overwrites the other's schedule
        ran_a += _steps(ex, page, [a[i]])
        ran_b += _steps(ex, page, [b[i]])
    assert ran_a[-1] is not None and ran_b[-1] is not None and ran_a[-1] is not ran_b[-1]
    assert ran_a[-1]._int_workspace_buffer is ran_b[-1]._int_workspace_buffer


def test_an_engine_s_persistent_buffers_get_a_wrapper_over_the_bound_layout(monkeypatch):
    ex, page = executor(monkeypatch, PagedWrapper, LLAMA, "fa3")
    ran = _steps(ex, page, advancing([14, 30], 16), persistent=True)
    shape = ex._layouts.shape(2, 1, 16)
    assert shape.bound is not None
    hp = shape.bound.planners[0]
    assert hp.scheduler.ready and ran[-1] is hp.wrapper
    # the copying layout ran the steps before the binding: fewer than AFTER, no wrapper of its own
    assert shape.own.eager_steps < EagerPlans.AFTER and not shape.own.planners
    assert hp.scheduler.replays == 16 - shape.own.eager_steps - EagerPlans.AFTER


def test_mla_plans_with_the_scheduler_alone_in_a_workspace_of_its_own(monkeypatch):
    ex, page = executor(monkeypatch, MlaWrapper, MLA)
    steps = advancing([33, 130], 10)
    ran = _steps(ex, page, steps)
    hp = ex._layouts.shape(2, 1, 16).own.planners[0]
    assert hp.scheduler.ready, hp.scheduler.refused
    assert not hp.shared and ran[-1] is hp.wrapper
    assert hp.scheduler.replays == len(steps) - EagerPlans.AFTER
    assert "plan_with_staged_workspace_bytes" not in vars(MlaWrapper.proxy)


def test_mla_layouts_past_the_cap_stay_on_the_backend_s_wrapper(monkeypatch):
    monkeypatch.setattr(EagerPlans, "MAX_OWN", 1)
    ex, page = executor(monkeypatch, MlaWrapper, MLA)
    first = _steps(ex, page, advancing([33, 130], 5))
    second = _steps(ex, page, advancing([33, 130, 64], 5))
    assert first[-1] is not None
    assert second == [None] * 5
    assert any("layouts already hold" in why for why in ex.backend.eager.refused.values())


def test_a_refused_check_returns_the_layout_to_the_backend_s_wrapper(monkeypatch):
    ex, page = executor(monkeypatch, lambda: PagedWrapper(stale=True), LLAMA, "fa2")
    ran = _steps(ex, page, advancing([14, 30], 10))
    after = EagerPlans.AFTER
    # the step that made it ran on it (planned whole); every later step on the backend's wrapper
    assert ran[after - 1] is not None
    assert ran[after:] == [None] * (10 - after)
    assert "did not reproduce" in ex.backend.eager.refused[(2, 1, 16, 0)]


def test_the_switch_off_keeps_every_step_on_the_backend_s_wrapper(monkeypatch):
    monkeypatch.setenv("ATTNPLAN_EAGER_SCHEDULER_REPLAY", "0")
    ex, page = executor(monkeypatch, PagedWrapper, LLAMA, "fa2")
    steps = advancing([14, 30], 8)
    assert _steps(ex, page, steps) == [None] * 8
    assert ex.backend._decode.whole_plans == 8


def test_a_step_whose_plan_info_differs_plans_whole_and_the_wrapper_holds_each_step_s_own(monkeypatch):
    # A plan info that follows the page count past 20 pages: the check's lengths (fewer pages) keep the
    # first one, longer steps later return another. A CUDA graph would refuse them (it captured the first);
    # an eager step plans whole, and the first step back on the first info plans whole again.
    ex, page = executor(monkeypatch, lambda: PagedWrapper(info=lambda ptr: [int(ptr[-1] > 20)]), LLAMA, "fa2")
    table = torch.arange(32, dtype=torch.int32).view(2, 16)
    seqs = [[14, 30], [15, 31], [16, 32], [17, 33], [200, 240], [201, 241], [18, 34], [19, 35], [20, 36]]
    whole = []
    for seq in seqs:
        step = ex.plan_step(_input(seq, table))
        w = step.extra.get("decode_wrapper", ex.backend._decode)
        ptr = page_indptr(seq, page)
        assert list(w._plan_info) == [int(ptr[-1] > 20)], seq          # what the wrapper's run reads
        want = schedule_of(ptr, seq)
        assert workspace(w, len(want)) == want, seq
        whole.append(getattr(w, "whole_plans", 0))
    hp = ex._layouts.shape(2, 1, 16).own.planners[0]
    assert hp.scheduler.ready and hp.scheduler.changed == 2
    # the two long steps and the first one back planned whole; the last two replayed alone
    assert whole[-3] == whole[-4] + 1 and whole[-1] == whole[-2] == whole[-3]


def test_a_layout_wrapper_that_raises_leaves_the_step_on_the_backend_s_wrapper(monkeypatch):
    class Raising(PagedWrapper):
        def plan(self, *args, **kwargs):
            raise RuntimeError("a check only the CUDA-graph mode makes")

    ex, page = executor(monkeypatch, PagedWrapper, LLAMA, "fa2", make_graph=Raising)
    ran = _steps(ex, page, advancing([14, 30], 6))
    assert ran == [None] * 6
    assert "raised RuntimeError" in ex.backend.eager.refused[(2, 1, 16, 0)]
    assert ex._layouts.shape(2, 1, 16).own.planners[0] is False

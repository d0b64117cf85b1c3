"""A CUDA-graph decode step that plans calls FlashInfer's scheduler alone, once the graph's first
update checked that this replays the wrapper's whole plan (issue 41; attnplan/adapter/plan_replay.py).

Held on the CPU with the real executor, backend, strategies (``graph_scheduler``) and
``DecodeGraph.update``; FlashInfer's wrappers are replaced by ones shaped as FlashInfer's are
(flashinfer/decode.py ``plan`` ends in ``self._plan_info = self._cached_module.plan(float, int,
pinned, <host arrays>, ...)`` on a module namespace; the MLA wrapper's planned backend holds a
module proxy whose *method* ``plan_with_staged_workspace_bytes`` it calls), whose scheduler
writes a schedule computed from the host arrays it is handed into the int workspace. Every step
checks that the workspace holds the schedule of that step's lengths, whichever way it was planned.
"""

from __future__ import annotations

import pytest

from attnplan.errors import AdapterCallError

torch = pytest.importorskip("torch")
pytest.importorskip("flashinfer")

from graph_stand_ins import (MlaWrapper as _MlaWrapper, PagedWrapper as _PagedWrapper, advancing as _advancing,  # noqa: E402
                             graph as _graph, page_indptr as _page_indptr, schedule_of, workspace as _workspace)

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def _run_steps(g, w, page, steps, schedule_lens=True):
    """Every step: the workspace holds this step's schedule (for fa2, planned from page counts
    alone, the lengths it was last planned with)."""
    table = torch.zeros(g.batch_size, g.layout.width, dtype=torch.int32)
    planned_lens = None
    for seq in steps:
        seq_t = torch.tensor(seq, dtype=torch.int32)
        before = g.plans_skipped
        g.update(seq_t, table, seq_t)
        if g.plans_skipped == before:
            planned_lens = seq
        want = schedule_of(_page_indptr(seq, page), planned_lens if schedule_lens else seq)
        assert _workspace(w)[:len(want)] == want, seq


@pytest.mark.parametrize("backend", ["fa2", "fa3"])
def test_planned_steps_call_the_scheduler_alone_and_leave_the_whole_plans_schedule(monkeypatch, backend):
    g, w, page = _graph(monkeypatch, _PagedWrapper, LLAMA, backend)
    steps = _advancing([14, 30], 3 * page)
    _run_steps(g, w, page, steps)
    s = g.scheduler
    assert s.ready and s.refused is None
    # the first update: the strategy's plan, the recorded one, one over other lengths, this step's
    # again; nothing whole after
    assert w.whole_plans == 4
    planned = len(steps) - g.plans_skipped
    assert s.replays == planned - 1
    if backend == "fa2":
        assert g.plans_skipped > 0
    else:
        assert g.plans_skipped == 0


def test_the_mla_wrapper_s_scheduler_method_is_replayed_and_restored(monkeypatch):
    g, w, page = _graph(monkeypatch, _MlaWrapper, MLA, batch=2, width=16)
    _run_steps(g, w, page, _advancing([33, 130], 10))
    assert g.scheduler.ready, g.scheduler.refused
    assert w.whole_plans == 4 and g.scheduler.replays == 9
    # the spy is gone: the proxy's own method again
    assert "plan_with_staged_workspace_bytes" not in vars(_MlaWrapper.proxy)


def test_a_wrapper_that_hands_its_scheduler_a_copy_keeps_its_whole_plan(monkeypatch):
    g, w, page = _graph(monkeypatch, lambda: _PagedWrapper(stale=True), LLAMA, "fa2")
    steps = _advancing([14, 30], 3 * page)
    _run_steps(g, w, page, steps)
    assert not g.scheduler.ready
    assert "did not reproduce" in g.scheduler.refused
    assert g.scheduler.replays == 0 and w.whole_plans > 4


def test_a_plan_info_that_follows_the_lengths_keeps_the_whole_plan(monkeypatch):
    g, w, page = _graph(monkeypatch, lambda: _PagedWrapper(info=lambda ptr: [int(ptr[1])]), LLAMA, "fa2")
    _run_steps(g, w, page, _advancing([14, 30], 2 * page))
    assert not g.scheduler.ready and "plan info changed" in g.scheduler.refused


def test_a_plan_info_change_after_capture_is_an_error_not_a_wrong_graph(monkeypatch):
    g, w, page = _graph(monkeypatch, lambda: _PagedWrapper(info=lambda ptr: [int(ptr[-1] > 20)]), LLAMA, "fa2")
    table = torch.zeros(2, 16, dtype=torch.int32)
    seq = torch.tensor([14, 30], dtype=torch.int32)
    g.update(seq, table, seq)
    assert g.scheduler.ready
    long = torch.tensor([200, 240], dtype=torch.int32)
    with pytest.raises(AdapterCallError, match="captured with"):
        g.update(long, table, long)


def test_no_scheduler_and_the_switch_off_keep_the_whole_plan(monkeypatch):
    g, w, page = _graph(monkeypatch, lambda: _PagedWrapper(module=False), LLAMA, "fa2")
    _run_steps(g, w, page, _advancing([14, 30], 2 * page))
    assert not g.scheduler.ready and "names no scheduler" in g.scheduler.refused
    monkeypatch.setenv("ATTNPLAN_GRAPH_SCHEDULER_REPLAY", "0")
    g, w, page = _graph(monkeypatch, _PagedWrapper, LLAMA, "fa2")
    steps = _advancing([14, 30], 2 * page)
    _run_steps(g, w, page, steps)
    assert not g.scheduler.ready and g.scheduler.replays == 0
    assert w.whole_plans == len(steps) - g.plans_skipped


def test_lengths_whose_page_counts_cannot_change_keep_the_whole_plan(monkeypatch):
    # one page per request and a table one page wide: no other page counts fit
    g, w, page = _graph(monkeypatch, _PagedWrapper, LLAMA, "fa3", batch=2, width=1)
    _run_steps(g, w, page, [[3, 5], [4, 6]])
    assert not g.scheduler.ready and "page count can change" in g.scheduler.refused


def test_a_check_that_trips_keeps_the_whole_plan_and_the_step_planned(monkeypatch):
    # the wrapper refuses the check's other lengths (one page doubled to two): the check refuses,
    # every step is planned whole
    g, w, page = _graph(monkeypatch, lambda: _PagedWrapper(refuse_above=20), LLAMA, "fa3", width=16)
    _run_steps(g, w, page, _advancing([10, 12], 4))
    assert not g.scheduler.ready and "raised ValueError" in g.scheduler.refused

"""A CUDA-graph decode step plans FlashInfer's fa2 wrapper only when the batch's page counts change
(issue 41): fa2's schedulers read the KV page indptr, not the token lengths
(``PagedDecode.graph_plan_pages_only``), so the schedule in the wrapper's int workspace stays the one
for the current page counts at every step; a call whose planner reads the lengths (fa3) plans every
step. Held on the CPU with the real executor, backend, strategy and ``DecodeGraph.update``, FlashInfer's
wrapper replaced by one that records what each plan saw."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flashinfer")

from graph_stand_ins import advancing as _steps, graph, page_indptr as _indptr  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


class _Wrapper:
    """Stands for FlashInfer's CUDA-graph wrapper: keeps the page indptr each plan saw."""

    def __init__(self):
        self.planned: list[list[int]] = []

    def plan(self, indptr, *args, **kwargs):
        self.planned.append(indptr.tolist())

    def run(self, *args, **kwargs):
        pass


def _graph(monkeypatch, backend: str, batch: int, width: int):
    g, w, page = graph(monkeypatch, _Wrapper, LLAMA, backend, batch, width)
    assert isinstance(w, _Wrapper)
    return g, w, page


@pytest.mark.parametrize("start", [[1], [14, 30, 1, 17], [16, 32, 48, 64]])
def test_fa2_plans_only_when_a_page_count_changes(monkeypatch, start):
    g, w, page = _graph(monkeypatch, "fa2", len(start), 16)
    assert g.planner.pages_only
    table = torch.zeros(len(start), 16, dtype=torch.int32)
    planned_for = []
    steps = _steps(start, 3 * page)
    for seq in steps:
        before = len(w.planned)
        seq_t = torch.tensor(seq, dtype=torch.int32)
        g.update(seq_t, table, seq_t)
        if len(w.planned) > before:
            planned_for.append(_indptr(seq, page))
        # the schedule in the workspace is always the one for this step's page counts
        assert w.planned[-1] == _indptr(seq, page), seq
    # one plan per distinct run of page counts, and no more
    changes = 1 + sum(_indptr(a, page) != _indptr(b, page) for a, b in zip(steps, steps[1:]))
    assert len(w.planned) == changes == len(planned_for)
    assert g.plans_skipped == len(steps) - changes
    assert g.plans_skipped > 0


def test_a_planner_that_reads_lengths_plans_every_step(monkeypatch):
    g, w, page = _graph(monkeypatch, "fa3", 2, 16)
    assert not g.planner.pages_only
    table = torch.zeros(2, 16, dtype=torch.int32)
    steps = _steps([20, 40], 2 * page)
    for seq in steps:
        seq_t = torch.tensor(seq, dtype=torch.int32)
        g.update(seq_t, table, seq_t)
    assert len(w.planned) == len(steps) and g.plans_skipped == 0


def test_a_new_length_set_with_the_same_pages_reuses_the_plan_and_a_shrink_replans(monkeypatch):
    g, w, page = _graph(monkeypatch, "fa2", 2, 16)
    table = torch.zeros(2, 16, dtype=torch.int32)
    for seq in ([17, 33], [20, 40], [32, 48], [16, 48], [1, 1], [1, 2]):
        seq_t = torch.tensor(seq, dtype=torch.int32)
        g.update(seq_t, table, seq_t)
        assert w.planned[-1] == _indptr(seq, page), seq
    # [17,33] -> [20,40] -> [32,48]: pages 2,3 each; [16,48]: 1,3; [1,1] and [1,2]: 1,1
    assert len(w.planned) == 3 and g.plans_skipped == 3

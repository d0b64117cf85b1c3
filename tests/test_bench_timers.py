"""The benches' host timer takes the calls it compares in turn, each in every place equally often (bench/xqa_vs_fa2.py
``host_only_each``): on the H100 hosts the place alone moved a call's median by 5-10 % (bench/logs/
h100-2026-11-27w/README.md), more than the trees compared differed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import xqa_vs_fa2  # noqa: E402


def test_each_call_takes_each_place_equally_often(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)      # no device here: nothing to wait for
    seen = []
    fns = [lambda i=i: seen.append(i) for i in range(3)]
    got = xqa_vs_fa2.host_only_each(fns, 6)
    assert len(got) == 3 and all(t >= 0 for t in got)
    rounds = [seen[k:k + 3] for k in range(0, len(seen), 3)]
    assert rounds[:3] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]] and rounds[3:] == rounds[:3]
    for i in range(3):                                        # every call in every place twice
        assert sorted(r.index(i) for r in rounds) == [0, 0, 1, 1, 2, 2]

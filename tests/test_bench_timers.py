"""The benches' host timer takes the calls it compares in turn, each in every place equally often and each right after
each other equally often (bench/xqa_vs_fa2.py ``host_only_each``): on the H100 hosts the place alone moved a call's
median by 5-10 % (bench/logs/h100-2026-11-27w/README.md), and with the order rotating only, one tree timed against
itself read 2-5 % apart, the call after another's taking the same one twice as often (bench/logs/h100-2026-11-27y)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import xqa_vs_fa2  # noqa: E402


def test_each_call_takes_each_place_and_follows_each_other_equally_often(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)      # no device here: nothing to wait for
    seen = []
    fns = [lambda i=i: seen.append(i) for i in range(3)]
    got = xqa_vs_fa2.host_only_each(fns, 12)
    assert len(got) == 3 and all(t >= 0 for t in got)
    rounds = [seen[k:k + 3] for k in range(0, len(seen), 3)]
    rotations = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    assert rounds[:6] == rotations + [r[::-1] for r in rotations] and rounds[6:] == rounds[:6]
    for i in range(3):                                        # every call in every place four times
        assert sorted(r.index(i) for r in rounds) == [0] * 4 + [1] * 4 + [2] * 4
    # (call, the call timed right after it), over whole cycles of the six orders (the last wraps to the first)
    after = Counter(zip(seen, seen[1:] + seen[:1]))
    for a in range(3):
        for b in range(a + 1, 3):                             # each pair's two orders equally often
            assert after[a, b] == after[b, a] > 0

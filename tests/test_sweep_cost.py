"""bench/sweep_cost.py: the sample it builds on the GPU and the estimate it scales from it (no GPU).

The estimate is checked against the H100 measurement it was written for
(bench/logs/h100-2026-11-25d/cost.jsonl) and against a hand-checkable file."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("sweep_cost", ROOT / "bench" / "sweep_cost.py")
sweep_cost = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep_cost)


@pytest.fixture(scope="module")
def modules():
    return sweep_cost.sweep_modules("H100")


@pytest.fixture()
def cached(modules, monkeypatch):
    monkeypatch.setattr(sweep_cost, "sweep_modules", lambda device, seed=0: modules)
    return modules


def test_the_sample_takes_every_family_and_builds_each_module_once(modules):
    fams = Counter(sweep_cost.family(p) for p in modules.values())
    assert len(modules) > 100 and len(fams) >= 6
    picked = sweep_cost.sample(modules, 3)
    got = Counter(sweep_cost.family(p) for p in picked)
    assert set(got) == set(fams)
    assert all(got[f] == min(3, fams[f]) for f in fams)
    assert len({p.module for p in picked}) == len(picked)
    assert all(modules[p.module] is p for p in picked)          # each module's first probe: the one that builds it


def test_estimate_scales_each_family_by_its_module_count(cached, tmp_path, capsys):
    fams = Counter(sweep_cost.family(p) for p in cached.values())
    f = tmp_path / "cost.jsonl"
    # 60 CPU-s per module everywhere, one family measured twice (50 and 70: mean 60), one failed build ignored
    rows = [{"family": fam, "outcome": "ok", "cpu_s": 60.0} for fam in sorted(fams)]
    first = sorted(fams)[0]
    rows[0] = {"family": first, "outcome": "ok", "cpu_s": 50.0}
    rows += [{"family": first, "outcome": "ok", "cpu_s": 70.0}, {"family": first, "outcome": "error", "cpu_s": 9999.0}]
    f.write_text("\n".join(json.dumps(r) for r in rows))
    assert sweep_cost.main(["estimate", str(f), "--cores", "4", "--lease-min", "30"]) == 0
    out = capsys.readouterr().out
    total = 60.0 * len(cached)
    assert f"{len(cached)} modules: about {total:,.0f} CPU-s" in out
    assert f"at least {total / 4 / 60:.0f} min" in out
    assert ("does not fit" in out) == (total / 4 / 60 > 30)


def test_estimate_refuses_a_sample_missing_a_family(cached, tmp_path, capsys):
    f = tmp_path / "cost.jsonl"
    f.write_text(json.dumps({"family": "xqa/xqa", "outcome": "ok", "cpu_s": 20.0}))
    assert sweep_cost.main(["estimate", str(f)]) == 2
    assert "no measured module for" in capsys.readouterr().err


def test_the_h100_measurement_says_one_lease_is_not_enough(cached, capsys):
    assert sweep_cost.main(["estimate", str(ROOT / "bench/logs/h100-2026-11-25d/cost.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "does not fit a 30-minute lease" in out and f"{len(cached)} modules" in out

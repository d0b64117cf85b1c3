"""The runner: JIT modules first, breadth-first over the rules; a failed build is not repeated."""

from __future__ import annotations

import textwrap
import threading

from attnplan.policy import load_rules, simulated_node
from attnplan.verify import generate, run_probes
from attnplan.verify.runner import build_order

PACK = textwrap.dedent("""\
    pack: t
    rules:
      - id: t.head
        title: t
        reason: t
        source: test
        backends: [fa2]
        when: {fact: config.is_mla, eq: false}
        require: {fact: config.head_dim, in: [64, 128, 256]}
      - id: t.page
        title: t
        reason: t
        source: test
        backends: [fa2]
        when: {fact: config.is_mla, eq: false}
        require: {fact: config.page_size, in: [16, 32, 64]}
    """)


def _gen(tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    return generate(load_rules(tmp_path), simulated_node("H100"))


def test_build_order_has_one_probe_per_module_and_reaches_every_rule_early(tmp_path):
    gen = _gen(tmp_path)
    order = build_order(gen.probes)
    assert len({p.module for p in order}) == len(order) == len({p.module for p in gen.probes})
    head_modules = {p.module for p in gen.probes if any(b.rule == "t.head" for b in p.boundaries)}
    page_modules = {p.module for p in gen.probes if any(b.rule == "t.page" for b in p.boundaries)}
    assert order[0].module in head_modules | page_modules
    assert {order[0].module, order[1].module} & page_modules


def test_module_built_once_then_its_probes_run_and_a_failed_build_is_inherited(tmp_path):
    gen = _gen(tmp_path)
    calls: dict[str, int] = {}
    lock = threading.Lock()
    failing = next(p.module for p in gen.probes if p.config.get("page_size") == 8)   # shared by page probes

    def runner(probe, timeout):
        with lock:
            calls[probe.id] = calls.get(probe.id, 0) + 1
        if probe.module == failing:
            return {"outcome": "error", "error": "RuntimeError: Ninja build failed", "seconds": 0.0}
        return {"outcome": "ok", "rel_err": 0.0, "tolerance": 0.01, "seconds": 0.0}

    results = run_probes(gen.probes, runner, jobs=3)
    assert set(results) == {p.id for p in gen.probes}
    same = [p for p in gen.probes if p.module == failing]
    assert len(same) > 2
    ran = [p for p in same if p.id in calls]
    assert len(ran) == 1
    for p in same:
        assert results[p.id]["outcome"] == "error"
        if p is not ran[0]:
            assert ran[0].id in results[p.id]["error"]
    others = [p for p in gen.probes if p.module != failing]
    assert all(calls[p.id] == 1 and results[p.id]["outcome"] == "ok" for p in others)

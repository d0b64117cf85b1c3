"""The runner: JIT modules first, breadth-first over the rules; a failed build is not repeated."""

from __future__ import annotations

import textwrap
import threading

from attnplan.policy import load_rules as _load_rules, simulated_node
from attnplan.verify import generate, run_probes
from attnplan.verify.runner import build_order


def load_rules(d):
    """The test's pack with the engine packs the whole-set check wants beside it (tests/verify_packs.py)."""
    from pathlib import Path

    from verify_packs import with_engine_packs

    return _load_rules(with_engine_packs(Path(d)))

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


def test_isolated_probes_of_modules_flashinfer_names_alike_never_overlap():
    """--isolate (run_probes): a module FlashInfer names like another (backends.yaml calls.sink.jit_name)
    neither builds nor runs while the other's processes are in flight; its own probes may run
    together, and unrelated modules run alongside."""
    import time

    from attnplan.verify.generate import Boundary, Probe

    def probe(i, module, name):
        return Probe(id=f"p{i:02d}", backend="fa3", phase="prefill", call="sink", config={}, refused_by=(),
                     boundaries=[Boundary(rule="sweep", check=0, side="accept", changed={})],
                     spec={"jit_name": name}, module=module)

    name = "attention_sink:fa3:dtype_q=bfloat16:sliding_window=True"
    probes = [probe(i, f"sink:hd{hd}", name) for i, hd in enumerate((64, 64, 128, 128, 256, 256))]
    probes += [probe(10 + i, f"prefill:{i}", None) for i in range(4)]
    lock = threading.Lock()
    live: dict[str, int] = {}
    bad: list[tuple[str, str]] = []
    most = {"all": 0}

    def runner(p, timeout):
        with lock:
            for m, n in live.items():
                if n and m != p.module and m.startswith("sink:") and p.module.startswith("sink:"):
                    bad.append((m, p.module))
            live[p.module] = live.get(p.module, 0) + 1
            most["all"] = max(most["all"], sum(live.values()))
        time.sleep(0.1)
        with lock:
            live[p.module] -= 1
        return {"outcome": "ok", "rel_err": 0.0, "tolerance": 0.01, "seconds": 0.1}

    results = run_probes(probes, runner, jobs=4)
    assert len(results) == len(probes) and all(r["outcome"] == "ok" for r in results.values())
    assert bad == []
    assert most["all"] >= 3


def test_cpu_summary_adds_what_the_probe_processes_spent():
    from attnplan.verify.runner import cpu_summary

    results = {"a": {"outcome": "ok", "cpu_s": 1500.0}, "b": {"outcome": "ok", "cpu_s": 420.0},
               "c": {"outcome": "skipped", "seconds": 0.0}}          # skipped: never ran, costs nothing
    line = cpu_summary(results, 16)
    assert "1,920 CPU-s (2 probe(s)" in line and "at least 2.0 min on this machine's 16 cores" in line
    assert "on this machine" not in cpu_summary(results, None)
    assert cpu_summary({"c": results["c"]}, 16) is None           # results from before cpu_s was recorded


def test_a_cuda_error_at_run_time_is_not_a_failed_build():
    # PyTorch's text for a CUDA error names compiling (TORCH_USE_CUDA_DSA): the module's other probes
    # must still run (issue 38: an illegal memory access in one probe says nothing of the next one).
    from attnplan.verify.runner import _build_failed

    cuda = ("AcceleratorError: CUDA error: an illegal memory access was encountered ... For debugging consider "
            "passing CUDA_LAUNCH_BLOCKING=1 Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert not _build_failed({"outcome": "error", "error": cuda})
    assert _build_failed({"outcome": "error", "error": "RuntimeError: Ninja build failed ... error: static assertion"})
    assert _build_failed({"outcome": "error", "error": "RuntimeError: compilation of xqa failed"})
    assert _build_failed({"outcome": "build-timeout", "error": "x"}) and not _build_failed({"outcome": "wrong"})

"""The exhaustive XQA run's report judges each probe on its own configuration (issue 38).

Sinks and the window's size are run arguments: one XQA module serves a plain probe and a variant
with sinks. The packs can accept the module and refuse the variant (xqa.spec-sinks: sinks over an
fp8 cache at speculative q_len 3-4 and some GQA groups). The H100 run of tier 3 measured 381 such
variants wrong (bench/logs/h100-2026-11-26g); they confirm the refusal and are no failure of an
accepted configuration. A result the kernel never produced (the probe's process could not load the
rule packs) is run again on resume and reported as not run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from attnplan.policy import AttentionConfig, default_ruleset, simulated_node
from attnplan.verify import Generated, build_report
from attnplan.verify.exhaustive import Module, xqa_probes
from attnplan.verify.generate import Target, refusals
from attnplan.verify.select import is_kernel_rule

NODE = simulated_node("H100")
BENCH = Path(__file__).resolve().parents[1] / "bench" / "xqa_exhaustive.py"


def _bench():
    spec = importlib.util.spec_from_file_location("xqa_exhaustive_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rs():
    return default_ruleset()


def _module(group: int, spec: int) -> Module:
    return Module("fp8_e4m3", "bf16", 64, group, False, spec, 16, True)


@pytest.mark.parametrize("group, spec, variant_refused", [
    (12, 2, True),     # q_len 3, group 12: measured wrong with sinks
    (9, 3, True),      # q_len 4, group 9: measured wrong with sinks
    (16, 3, True),     # q_len 4, group 16: one probe out of tolerance (0.127), stays refused
    (16, 2, False),    # q_len 3, group 16: measured correct with sinks
    (32, 3, False),    # q_len 4, group 32: measured correct with sinks
    (8, 3, False),     # q_len 4, group 8 (32 rows): measured correct with sinks
])
def test_the_sinks_variant_is_judged_on_its_own_config(rs, group, spec, variant_refused):
    m = _module(group, spec)
    rules = [r for r in rs.rules if is_kernel_rule(r)]
    # The module itself (no sinks) is accepted: the run builds it either way.
    assert refusals(rules, AttentionConfig.model_validate(m.config()), NODE, Target("xqa", "decode", False)) == ()
    plain, variant = xqa_probes(rs, NODE, [m])
    assert plain.module == variant.module and variant.spec["sinks"] and not plain.spec["sinks"]
    assert plain.refused_by == () and plain.boundaries[0].side == "accept"
    assert ("xqa.spec-sinks" in variant.refused_by) == variant_refused
    assert variant.boundaries[0].side == ("refuse" if variant_refused else "accept")


def _report(rs, probes, results, bench):
    rules = [r.id for r in rs.rules if is_kernel_rule(r) and r.id.startswith("xqa.")]
    report = build_report(Generated(probes, [], rules), results, device="test", capability="9.0",
                          flashinfer="0.7.2.post1", torch="test", rules_revision=rs.revision)
    for rec, p in zip(report["probes"], probes):
        rec["tier"] = p.spec.get("tier")
    bench.judge_sides(report)
    return report


def test_a_refused_variant_that_fails_confirms_the_rule_and_is_not_dangerous(rs):
    bench = _bench()
    plain, variant = xqa_probes(rs, NODE, [_module(12, 2)])
    wrong = {"outcome": "wrong", "rel_err": 0.46, "tolerance": 0.1225, "error": "relative error 0.46 > 0.1225"}
    report = _report(rs, [plain, variant], {plain.id: {"outcome": "ok", "rel_err": 0.02, "tolerance": 0.1225},
                                            variant.id: wrong}, bench)
    verdicts = {p["id"]: p["verdicts"].get("exhaustive") for p in report["probes"]}
    assert verdicts[variant.id] == "consistent" and verdicts[plain.id] == "consistent"
    text = bench.summary(report, [3], {})
    row = next(line for line in text.splitlines() if line.startswith(f"| {variant.id} "))
    assert "refused by xqa.spec-sinks" in row and "wrong" in row
    # The same failure on an accepted variant is dangerous: the report still tells them apart.
    plain16, variant16 = xqa_probes(rs, NODE, [_module(16, 2)])
    report = _report(rs, [plain16, variant16], {variant16.id: wrong}, bench)
    assert {p["id"]: p["verdicts"].get("exhaustive") for p in report["probes"]}[variant16.id] == "dangerous"


def test_a_result_the_kernel_never_produced_is_run_again():
    bench = _bench()
    assert bench.infra_error({"outcome": "error", "error": "RulePackError: backends.yaml: unknown fact 'x'"})
    assert not bench.infra_error({"outcome": "error", "error": "AcceleratorError: CUDA error: an illegal memory access"})
    assert not bench.infra_error({"outcome": "wrong", "error": "relative error 0.46 > 0.1225"})
    assert not bench.infra_error({"outcome": "ok"})

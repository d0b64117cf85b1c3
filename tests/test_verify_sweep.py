"""The covering sweep (issue 22): every pair of factor values some accepted config holds is held
by an accepted probe; only accepted configs; deterministic per seed; a partial run resumes."""

from __future__ import annotations

import dataclasses
import itertools
import json
import textwrap

import pytest

from attnplan.policy import AttentionConfig, load_rules as _load_rules, simulated_node
from attnplan.verify.select import kernel_rules  # the rules verify holds (engine rules are policy)
from attnplan.verify.generate import refusals
from attnplan.verify.report import build_report, rejudge
from attnplan.verify import Generated, tolerance
from attnplan.verify.sweep import (SweepTarget, calibration_probes, config_of, cover, factors, findings, sweep,
                                   sweep_targets)

# A small pack (fa2 only) so the full covering runs in a second: two cuts through the space.

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
      - id: t.kv
        title: t
        reason: t
        source: test
        backends: [fa2]
        when: {fact: config.kv_dtype, in: [fp16, bf16]}
        require: {fact: config.kv_dtype, eq: {fact: config.dtype}}
      - id: t.window
        title: t
        reason: t
        source: test
        backends: [fa2]
        phases: [decode]
        when: {fact: config.sliding_window, is_null: false}
        require: {fact: config.page_size, min: 16}
    """)
NODE = simulated_node("H100")
T = SweepTarget("fa2", "decode", False, False)


@pytest.fixture(scope="module")
def rs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pack")
    (d / "t.yaml").write_text(PACK)
    return load_rules(d)


def _accepted(rs, t, row):
    config = AttentionConfig.model_validate(config_of(t, row))
    return config, refusals(kernel_rules(rs), config, NODE, t.base) == ()


def test_every_reachable_pair_is_covered_and_every_row_is_accepted(rs):
    cov = cover(rs, NODE, T, seed=0)
    names = [n for n, _ in factors(T)]
    held = set()
    for row in cov.rows:
        _, ok = _accepted(rs, T, row)
        assert ok, row
        held |= {((a, row[a]), (b, row[b])) for a, b in itertools.combinations(names, 2)}
    domains = dict(factors(T))
    all_pairs = {((a, va), (b, vb)) for a, b in itertools.combinations(names, 2) for va in domains[a] for vb in domains[b]}
    refused = set(cov.refused)
    assert held | refused == all_pairs and not held & refused
    assert cov.pairs_covered == len(held) and cov.pairs_total == len(all_pairs)
    # The refused pairs are refused by the pack: every one of them names a value no accepted config
    # can hold beside the other (checked here for the single-fact cuts: head 512, fp16 KV with bf16).
    assert (("head", (512, 512)), ("group", 1)) in refused
    assert any(p == (("dtype", "bf16"), ("kv", "fp16")) for p in refused)
    # ... and a pair that needs another factor moved (window with page 1 refused, window with
    # page 16 accepted) is covered, not refused.
    assert (("page", 16), ("window", 64)) in held and (("page", 1), ("window", 64)) in refused


def test_pairs_refused_are_truly_unreachable_for_one_cut(rs):
    """Brute force over the factors one refused pair leaves free: no accepted config holds it."""
    cov = cover(rs, NODE, T, seed=0)
    domains = dict(factors(T))
    pair = (("page", 1), ("window", 64))
    assert pair in cov.refused
    for page, window in [(1, 64)]:
        for head, kv, dtype in itertools.product(domains["head"], domains["kv"], domains["dtype"]):
            row = {"head": head, "group": 4, "dtype": dtype, "kv": kv, "page": page, "window": window,
                   "soft_cap": None, "spec": 0, "shape": "b1-short"}
            try:
                assert not _accepted(rs, T, row)[1]
            except ValueError:
                pass


def test_same_seed_same_probes_other_seed_other_rows(rs):
    a = sweep(rs, NODE, seed=3, only=["fa2/decode"])
    b = sweep(rs, NODE, seed=3, only=["fa2/decode"])
    c = sweep(rs, NODE, seed=4, only=["fa2/decode"])
    assert [p.id for p in a.probes] == [p.id for p in b.probes]
    assert [p.spec for p in a.probes] == [p.spec for p in b.probes]
    assert {p.id.split("-")[1] for p in a.probes} != {p.id.split("-")[1] for p in c.probes}


def test_probes_carry_the_plan_and_the_batch_shape(rs):
    sw = sweep(rs, NODE, seed=0, only=["fa2/decode"])
    assert sw.probes and all(p.refused_by == () and p.boundaries[0].rule == "sweep" for p in sw.probes)
    shapes = {len(p.spec["kv_lens"]) for p in sw.probes}
    assert 1 in shapes and max(shapes) > 1                         # batch 1 and many
    assert max(max(p.spec["kv_lens"]) for p in sw.probes) > 4000  # long context
    for p in sw.probes:
        assert p.spec["q_lens"] == [p.spec["q_len"]] * len(p.spec["kv_lens"])
        assert p.spec["tolerance"] == tolerance.tolerance(p.spec["kernel_key"], p.spec["output_dtype"])
    spec_q = {p.spec["q_len"] for p in sw.probes}
    assert {1, 2, 4} <= spec_q


def test_targets_split_by_call_and_trtllm_is_not_run_on_hopper():
    from attnplan.policy import default_ruleset

    labels = {t.label: why for t, why in sweep_targets(default_ruleset(), 90)}
    assert "fa2/decode" in labels and "fa2/decode+sinks" in labels
    assert labels["trtllm-gen/decode"] and labels["xqa/decode"] is None


def test_resume_takes_earlier_results_by_digest_and_reruns_only_the_rest(rs, tmp_path):
    from attnplan.cli.verify import _resumed

    sw = sweep(rs, NODE, seed=0, only=["fa2/decode"])
    log = tmp_path / "results.jsonl"
    first, skipped = sw.probes[0], sw.probes[1]
    log.write_text(json.dumps({"digest": first.id.split("-")[1], "outcome": "ok", "rel_err": 1e-3}) + "\n"
                   + json.dumps({"digest": skipped.id.split("-")[1], "outcome": "skipped"}) + "\n")
    again = sweep(rs, NODE, seed=0, only=["fa2/decode"])
    done = _resumed([str(log)], again.probes)
    assert done == {again.probes[0].id: {"outcome": "ok", "rel_err": 1e-3}}


def test_rejudge_and_findings_name_the_rule_to_change(rs):
    sw = sweep(rs, NODE, seed=0, only=["fa2/decode"])
    results = {}
    for p in sw.probes:
        bad = p.config.get("sliding_window") is not None
        results[p.id] = {"outcome": "ok", "rel_err": 0.5 if bad else 1e-3, "nonfinite": 0}
    report = build_report(Generated(sw.probes, [], []), results, device="H100", capability="9.0", flashinfer="x")
    data = {"factor": 5, "floor": {"bfloat16": 1.95e-3, "float16": 2.44e-4}, "spreads": {}}
    judged = rejudge(report, data)
    bad = [p for p in judged["probes"] if p["config"].get("sliding_window") is not None]
    assert bad and all(p["outcome"] == "wrong" and p["verdicts"]["sweep"] == "dangerous" for p in bad)
    f = findings(judged, rs)
    assert set(f["dangerous"]) == {p["id"] for p in bad}
    assert any(v["factor"] == "window" for s in f["suspects"] for v in s["values_only_in_failures"])
    assert "t.window" in {r["rule"] for r in f["rules_to_change"]}


def test_calibration_reseeds_each_kernels_plainest_probe(rs):
    sw = sweep(rs, NODE, seed=0, only=["fa2/decode"])
    cal = calibration_probes(sw.probes)
    keys = {p.spec["kernel_key"] for p in sw.probes}
    assert {p.spec["kernel_key"] for p in cal} == keys and len(cal) == 3 * len(keys)
    assert len({p.spec["seed"] for p in cal}) == len(cal)
    table = tolerance.calibrate([("k", 1e-3), ("k", 3e-3), ("bad", 0.4)], {"factor": 5, "floor": {"bfloat16": 1e-3}},
                                device="H100", flashinfer="x", date="d")
    assert table["spreads"]["k"]["spread"] == 3e-3 and table["spreads"]["k"]["threshold"] == 0.015
    assert table["spreads"]["bad"]["suspect"] is True
    assert tolerance.tolerance("bad", data=table) == 5 * 1e-3          # a suspect spread is never used
    assert tolerance.tolerance("k", data=table) == 0.015


def test_a_target_run_is_the_full_sweeps_probes_of_that_target(rs):
    # A target's rows reuse the modules of the targets covered before it, so `--target` must
    # cover those too: its probes (digests) are the full sweep's, and a --target run resumes into
    # a whole sweep (the 2026-11-25 H100 run of `--target xqa` matched 27 of 118 digests before).
    fa2 = dataclasses.replace(rs, backends={"fa2": rs.backends["fa2"]})   # 5 targets: seconds, not minutes
    full = sweep(fa2, NODE, seed=0)
    label = "fa2/decode+sinks"                                               # covered after three others
    part = sweep(fa2, NODE, seed=0, only=[label])
    want = {p.id.split("-", 1)[1] for p in full.probes if p.spec["sweep_target"] == label}
    assert want and {p.id.split("-", 1)[1] for p in part.probes} == want
    assert [c.target.label for c in part.coverage] == [label]


def test_the_sweeps_judge_answers_as_refusals_on_the_shipped_packs():
    # The judge picks the checks of its (backend, phase) once and stops at the first refusal (half the
    # sweep's generation time); it must accept exactly what generate.refusals accepts, on every target.
    import random

    from attnplan.policy import default_ruleset
    from attnplan.verify.sweep import _Judge

    shipped = default_ruleset()
    rng = random.Random(7)
    answers = set()
    for t, _ in sweep_targets(shipped, 90):
        judge = _Judge(shipped, NODE, t, "")
        domains = dict(factors(t))
        for _ in range(120):
            row = {n: rng.choice(d) for n, d in domains.items()}
            try:
                config = AttentionConfig.model_validate(config_of(t, row))
            except ValueError:
                assert not judge(row)
                continue
            ok = refusals(judge.rules, config, NODE, t.base) == ()
            assert judge(row) == ok, (t.label, row)
            answers.add((t.backend, ok))
    assert {ok for _, ok in answers} == {True, False}
    assert {b for b, ok in answers if ok} >= {"fa2", "fa3", "xqa", "fa2-mla"}

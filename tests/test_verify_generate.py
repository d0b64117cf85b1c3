"""The probe generator: values on both sides of every operator's boundary, from the rule data."""

from __future__ import annotations

import textwrap

import pytest

from attnplan.policy import AttentionConfig, load_rules as _load_rules, simulated_node
from attnplan.policy.conditions import compile_condition
from attnplan.verify.select import kernel_rules  # the rules verify holds (engine rules are policy)
from attnplan.verify.domains import dynamic_values, leaf_values
from attnplan.verify.generate import generate, refusals, targets



def load_rules(d):
    """The test's pack with the engine packs the whole-set check wants beside it (tests/verify_packs.py)."""
    from pathlib import Path

    from verify_packs import with_engine_packs

    return _load_rules(with_engine_packs(Path(d)))

def leaf(raw):
    return compile_condition(raw)


@pytest.mark.parametrize("raw, inside, outside", [
    ({"fact": "config.head_dim", "in": [64, 128, 256]}, {64, 128, 256}, {32, 96, 192, 512}),
    ({"fact": "config.page_size", "not_in": [16]}, {8, 32}, {16}),
    ({"fact": "config.head_dim", "eq": 192}, {192}, {96, 384}),
    ({"fact": "config.sinks", "ne": True}, {False}, {True}),
    ({"fact": "config.num_qo_heads", "min": 8}, {8}, {7}),
    ({"fact": "config.num_qo_heads", "max": 16}, {16}, {17}),
    ({"fact": "config.head_dim", "divisible_by": 16}, {16, 32}, {24}),
    ({"fact": "config.logits_soft_cap", "is_null": True}, {None}, {30.0}),
])
def test_each_operator_names_values_on_both_sides(raw, inside, outside):
    pred = leaf(raw)
    values = leaf_values(pred)
    assert inside <= values and outside <= values
    assert all(pred.test({raw["fact"]: v}) for v in inside)
    assert not any(pred.test({raw["fact"]: v}) for v in outside)


def test_string_in_list_reaches_the_values_outside_it():
    values = leaf_values(leaf({"fact": "config.kv_dtype", "in": ["fp16", "bf16"]}))
    assert {"fp16", "bf16"} < values and {"fp8_e4m3", "nvfp4"} <= values


def test_version_specifiers_are_not_probeable():
    assert leaf_values(leaf({"fact": "node.flashinfer_version", "version": ">=0.6"})) == set()


def test_fact_reference_operands_take_the_other_facts_value():
    pred = leaf({"fact": "config.num_qo_heads", "divisible_by": {"fact": "config.num_kv_heads"}})
    vals = dynamic_values(pred, {"config.num_qo_heads": 8, "config.num_kv_heads": 4})["config.num_qo_heads"]
    assert any(v % 4 == 0 for v in vals) and any(v % 4 for v in vals)


def _pack(tmp_path, body: str):
    (tmp_path / "test.yaml").write_text(textwrap.dedent(body))
    return load_rules(tmp_path)


PACK = """\
pack: t
rules:
  - id: t.head
    title: t
    reason: t
    source: test
    backends: [fa2]
    when: {fact: config.is_mla, eq: false}
    require: {fact: config.head_dim, in: [64, 128]}
  - id: t.heads
    title: t
    reason: t
    source: test
    backends: [fa2]
    require: {fact: config.num_qo_heads, max: 16}
  - id: t.version
    title: t
    reason: t
    source: test
    backends: [fa2]
    require: {fact: node.flashinfer_version, version: ">=0.1"}
"""


def test_probes_on_both_sides_of_each_boundary_and_only_that_rule_refuses(tmp_path):
    rs = _pack(tmp_path, PACK)
    node = simulated_node("H100")
    gen = generate(rs, node)
    for rule in ("t.head", "t.heads"):
        mine = [p for p in gen.probes if any(b.rule == rule for b in p.boundaries)]
        sides = {b.side for p in mine for b in p.boundaries if b.rule == rule}
        assert sides == {"accept", "refuse"}, rule
        for p in mine:
            cfg = AttentionConfig.model_validate(p.config)
            t = next(t for t in targets(rs) if (t.backend, t.phase, t.mla) == (p.backend, p.phase, cfg.is_mla))
            assert refusals(kernel_rules(rs), cfg, node, t) == p.refused_by
            assert p.refused_by in ((), (rule,))
    heads = {p.config["num_qo_heads"] for p in gen.probes if p.refused_by == ("t.heads",)}
    assert heads == {17}
    refused_dims = {p.config["head_dim"] for p in gen.probes if p.refused_by == ("t.head",)}
    assert {32, 96, 256} <= refused_dims and not refused_dims & {64, 128}
    version_gaps = [g for g in gen.gaps if g.rule == "t.version" and g.side == "refuse"]
    assert version_gaps and all("version" in g.reason for g in version_gaps)


def test_quick_keeps_one_probe_per_side(tmp_path):
    rs = _pack(tmp_path, PACK)
    gen = generate(rs, simulated_node("H100"), only=["t.head"], quick=True)
    per_side = {}
    for p in gen.probes:
        for b in p.boundaries:
            per_side.setdefault((b.rule, b.check, p.backend, p.phase, b.side), set()).add(p.id)
    assert per_side and all(len(v) == 1 for v in per_side.values())
    assert gen.rules == ["t.head"]


def test_unknown_rule_id_is_a_key_error(tmp_path):
    with pytest.raises(KeyError):
        generate(_pack(tmp_path, PACK), simulated_node("H100"), only=["nope"])


def test_shipped_rules_trtllm_is_read_from_source_only_on_hopper():
    from attnplan.policy import default_ruleset

    gen = generate(default_ruleset(), simulated_node("H100"), only=["trtllm.family"], quick=True)
    assert not [p for p in gen.probes if not p.skip]
    assert gen.gaps and all(g.reason.startswith("read from source only") for g in gen.gaps)

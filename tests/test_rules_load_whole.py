"""Issue 40 #3: the rule set loads whole or not at all.

A pack set without a rule the code looks up (the SGLang resolver's ``rs.rule("sglang.kv-names")``) or
the catalog names (``engines.sglang.native``) used to load and then fail every SGLang plan with a
KeyError; a typo in ``backends.yaml``'s engine rows loaded and failed every vLLM-layer plan at run
time. Both are now load errors naming the file and the entry: ``RulePackError`` (CLI exit 2, serve
not ready)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from attnplan.cli.main import main
from attnplan.policy import RulePackError, default_ruleset, load_rules
from attnplan.policy.rulepack import RESOLVER_RULES, _named_rules, check_whole
from attnplan.rules import BACKENDS_FILE, PACKS_DIR

ROOT = Path(__file__).resolve().parents[1]
SGLANG = "attnplan.sglang.resolve:engine_resolution"


def _native_ids() -> set[str]:
    return {rid for _, rid in _named_rules(default_ruleset().engines["sglang"].native or {})}


def _without(tmp_path: Path, rule_id: str) -> Path:
    """A copy of the shipped packs with ``rule_id`` taken out of its pack."""
    d = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, d)
    for p in sorted(d.glob("*.yaml")):
        data = yaml.safe_load(p.read_text())
        kept = [r for r in data["rules"] if r["id"] != rule_id]
        if len(kept) != len(data["rules"]):
            data["rules"] = kept
            p.write_text(yaml.safe_dump(data, sort_keys=False))
            return d
    raise AssertionError(f"no shipped pack holds {rule_id}")


def test_the_shipped_rules_are_whole():
    rs = default_ruleset()
    check_whole(rs, str(BACKENDS_FILE), str(PACKS_DIR))
    ids = {r.id for r in rs.rules}
    assert RESOLVER_RULES[SGLANG] <= ids and _native_ids() <= ids


def test_the_declared_ids_hold_every_rule_id_the_sglang_resolver_names():
    # The ids are read from the resolver's source, so a new _refuse("sglang.x", ...) or rs.rule("sglang.x")
    # without an entry in RESOLVER_RULES fails here, not in a user's plan.
    text = (ROOT / "attnplan" / "sglang" / "resolve.py").read_text()
    named = set(re.findall(r"""["'](sglang\.[a-z0-9]+(?:-[a-z0-9]+)*)["']""", text))
    ids = {r.id for r in default_ruleset().rules}
    named = {n for n in named if n in ids or not n.startswith("sglang.srt")}
    assert named, "no rule ids found in attnplan/sglang/resolve.py"
    assert named <= RESOLVER_RULES[SGLANG], sorted(named - RESOLVER_RULES[SGLANG])


@pytest.mark.parametrize("rule_id", sorted(RESOLVER_RULES[SGLANG]))
def test_a_pack_set_without_a_rule_the_code_needs_does_not_load(tmp_path, rule_id):
    d = _without(tmp_path, rule_id)
    with pytest.raises(RulePackError) as info:
        load_rules(d)
    assert info.value.rule == rule_id and rule_id in str(info.value) and str(d) in str(info.value)


@pytest.mark.parametrize("rule_id", sorted(_native_ids()))
def test_a_pack_set_without_a_rule_the_catalog_names_does_not_load(tmp_path, rule_id):
    d = _without(tmp_path, rule_id)
    with pytest.raises(RulePackError) as info:
        load_rules(d)
    assert info.value.file == str(BACKENDS_FILE) and repr(rule_id) in str(info.value)
    assert "engines.sglang.native" in str(info.value)


def test_cli_and_serve_refuse_an_incomplete_rule_set(tmp_path, capsys):
    d = _without(tmp_path, "sglang.kv-names")
    for argv in (["rules", "--rules", str(d)],
                 ["plan", "--device", "H100", "--engine", "sglang", "--head-dim", "128", "--num-heads", "32",
                  "--num-kv-heads", "8", "--rules", str(d)]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and "sglang.kv-names" in err and len(err.strip().splitlines()) == 1, (argv, err)
    from fastapi.testclient import TestClient

    from attnplan.policy import simulated_node
    from attnplan.rest.app import create_app

    with TestClient(create_app(node=simulated_node("H100"), rules_dir=d)) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and "sglang.kv-names" in r.json()["reason"]
        r = c.post("/v1/plan", json={"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}})
        assert r.status_code == 503


# (text in backends.yaml, its typo, words the error must hold besides the file)
TYPOS = [
    ("      - dtype: model\n", "      - dtype: modle\n", ["query_dtype", "'modle'"]),
    ("      - dtype: model\n", "      - dtyp: model\n", ["query_dtype", "dtyp"]),
    ("{backends: [trtllm-gen], when: {fact: config.kv_dtype, eq: nvfp4}, dtype: fp8_e4m3}",
     "{backends: [trtllm-gem], when: {fact: config.kv_dtype, eq: nvfp4}, dtype: fp8_e4m3}", ["'trtllm-gem'"]),
    ("refused_when: &flashinfer_refusals", "refused_whne: &flashinfer_refusals", ["engine_backend", "refused_whne"]),
    ('{reason: "DCP not supported", when: {fact: config.dcp_world_size, min: 2}}',
     '{reason: "DCP not supported", when: {fact: config.dcp_world_sise, min: 2}}',
     ["engine_backend.standard", "TRITON_ATTN", "config.dcp_world_sise"]),
    ("        - name: CUTLASS_MLA\n          when: {fact: node.capability_major, eq: 10}",
     "        - name: CUTLASS_MLA\n          when: {fact: node.capability_major, equals: 10}",
     ["engine_backend.mla", "CUTLASS_MLA"]),
    ("rule: sglang.fa4-page,", "rule: sglang.fa4-paeg,", ["engines.sglang.native", "'sglang.fa4-paeg'"]),
    ("standard_only: true, platform: is_sm100", "standard_onyl: true, platform: is_sm100",
     ["engines.sglang.native", "standard_onyl"]),
]


@pytest.mark.parametrize("old,new,words", TYPOS, ids=[t[1][:32].strip() for t in TYPOS])
def test_a_typo_in_backends_yaml_is_a_load_error_naming_the_entry(tmp_path, old, new, words):
    text = BACKENDS_FILE.read_text()
    assert old in text, f"backends.yaml no longer holds {old!r}: pick another entry for this test"
    bad = tmp_path / "backends.yaml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(RulePackError) as info:
        load_rules(PACKS_DIR, bad)
    msg = str(info.value)
    assert info.value.file == str(bad) and str(bad) in msg
    for w in words:
        assert w in msg, (w, msg)

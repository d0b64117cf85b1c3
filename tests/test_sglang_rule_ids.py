"""Issue 40 class 3 (SGLang's part): a pack set without one of the rules SGLang's resolution names fails
naming the rule (RulePackError), never a KeyError at plan time; the code's list of the ids it names is the
list resolve.py spells."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from attnplan import policy
from attnplan.policy.errors import RulePackError
from attnplan.policy.rulepack import load_ruleset
from attnplan.rules import BACKENDS_FILE, pack_files
from attnplan.sglang import SglangEngine, SglangFlags
from attnplan.sglang.data import CODE_RULES, native, referenced_rules

ROOT = Path(__file__).resolve().parents[1]
RS = policy.default_ruleset()


def test_code_rules_are_the_ids_resolve_spells():
    text = (ROOT / "attnplan" / "sglang" / "resolve.py").read_text()
    assert set(re.findall(r'"(sglang\.[a-z0-9-]+)"', text)) == set(CODE_RULES)


def test_every_referenced_rule_exists_in_the_shipped_packs():
    ids = {r.id for r in RS.rules}
    assert referenced_rules(native(RS)) <= ids


@pytest.mark.parametrize("rid", sorted(CODE_RULES | {"sglang.eagle-topk-trtllm-mha", "sglang.llama4-backends",
                                                     "sglang.hybrid-gdn-backends", "sglang.cutedsl-mla"}))
def test_a_pack_set_without_one_rule_fails_naming_it(tmp_path, rid):
    src = (ROOT / "attnplan" / "rules" / "packs" / "sglang.yaml").read_text()
    start = src.index(f"  - id: {rid}\n")
    nxt = src.find("\n  - id: ", start + 1)
    (tmp_path / "sglang.yaml").write_text(src[:start] + (src[nxt + 1:] if nxt != -1 else ""))
    others = [p for p in pack_files(ROOT / "attnplan" / "rules" / "packs") if p.name != "sglang.yaml"]
    with pytest.raises(RulePackError, match=re.escape(rid)):   # at load, or at the first SGLang plan at the latest
        rs = load_ruleset([*others, tmp_path / "sglang.yaml"], BACKENDS_FILE)
        policy.plan_for(policy.make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}),
                        policy.simulated_node("B200"), ruleset=rs, engine=SglangEngine(SglangFlags()))


def test_a_table_row_naming_an_unknown_platform_fails():
    spec = RS.engines["sglang"]
    row = {"rule": "sglang.llama4-backends", "source": "x", "platform": "is_sm999", "set": {"attention_backend": "triton"}}
    cond = {"rule": "sglang.llama4-backends", "source": "x", "when": {"fact": "sglang.is_sm999", "eq": True},
            "set": {"attention_backend": "triton"}}
    for bad in (row, cond):   # the short key and the condition's fact: both fail naming it
        rs = dataclasses.replace(RS, engines={**RS.engines, "sglang": spec.model_copy(
            update={"native": {**spec.native, "pipeline": [bad, *spec.native["pipeline"]]}})})
        with pytest.raises(RulePackError, match="is_sm999"):
            native(rs)

"""The planner names no engine (issue 36 item 6): what an engine is called, how its command line spells a fix,
which layer is attnplan's own adapter, which rules its verdict names - all of it is backends.yaml
``engines.<name>`` data, read generically by attnplan/policy/. A string constant in policy code equal to an
engine name declared there is a branch or a table that belongs in the data.

The scan is over the AST, so docstrings and comments may name engines. Each exception left is in ALLOWED
with why and how many times it occurs; a count that no longer matches fails too, so the list only shrinks.
The second half checks that the data the policy reads instead is validated at load (a missing key fails
naming it) and drives the answers (a changed spelling changes the flag).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
import yaml

from attnplan.policy.rulepack import RulePackError, load_ruleset
from attnplan.policy.shipped import default_ruleset
from attnplan.policy.suggest import suggestion_flag
# the same docstring test as the capability-number scan (tests/ is on the path: pytest's prepend import mode)
from test_no_rules_in_code import _docstrings

POLICY = Path(__file__).resolve().parent.parent / "attnplan" / "policy"
RULES = POLICY.parent / "rules"
BACKENDS = RULES / "backends.yaml"

SCHEMA_KEY = ("the rule-pack schema key `vllm:` (a rule's vLLM range, RuleSpec.vllm) names its engine; moving it to "
              "`engine:` + `versions:` changes the pack format (packs, README, scripts/readme_rules_table.py)")
# (file in attnplan/policy/, the constant, how many times, why)
ALLOWED: tuple[tuple[str, str, int, str], ...] = (
    ("backend_names.py", "flashinfer", 2, "the backend name `flashinfer` (request vocabulary, vLLM's FLASHINFER -> "
                                          "attnplan's), which the engine layer shares: not the engine"),
    ("answer.py", "flashinfer", 1, "EngineRef's pydantic default (an answer made with no engine at all): a model "
                                   "default cannot read the rule set"),
    ("rulepack.py", "vllm", 3, SCHEMA_KEY),
    ("rulepack.py", "flashinfer", 1, "the rule-pack schema key `flashinfer:` (a kernel rule's FlashInfer range), "
                                     "named in its load error"),
)


def _engine_names() -> set[str]:
    return set(yaml.safe_load(BACKENDS.read_text())["engines"])


def _findings() -> Counter:
    names = _engine_names()
    found: Counter = Counter()
    for path in sorted(POLICY.glob("*.py")):
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs and node.value in names:
                found[(path.name, node.value)] += 1
    return found


def test_the_scan_looks_for_the_engines_backends_yaml_declares():
    # the scan looks for the names backends.yaml declares: a new engine is covered as soon as it is declared
    assert {"vllm", "sglang", "flashinfer"} <= _engine_names() == set(default_ruleset().engines)


def test_policy_code_names_no_engine_beyond_the_allow_list():
    allowed = {(f, lit): n for f, lit, n, _ in ALLOWED}
    found = _findings()
    extra = {k: v for k, v in found.items() if v > allowed.get(k, 0)}
    assert not extra, ("engine names written in attnplan/policy/ code (put the table or branch in backends.yaml "
                       f"engines.<name> and read it from the rule set, or name the exception in ALLOWED): {extra}")


def test_every_allow_list_entry_is_still_needed_as_counted():
    found = _findings()
    stale = [(f, lit, n, found.get((f, lit), 0)) for f, lit, n, _ in ALLOWED if found.get((f, lit), 0) != n]
    assert not stale, f"ALLOWED counts that no longer match (file, name, allowed, found): shrink the list: {stale}"


# -- the data the policy reads instead ---------------------------------------------------------------------
def _rules_with(tmp_path: Path, edit) -> object:
    data = yaml.safe_load(BACKENDS.read_text())
    edit(data)
    out = tmp_path / "backends.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_ruleset(sorted((RULES / "packs").glob("*.yaml")), out)


@pytest.mark.parametrize("key", ["display", "flags", "kv_dtype_spelling"])
def test_a_missing_engine_key_is_a_load_error_naming_it(tmp_path, key):
    with pytest.raises(RulePackError, match=key):
        _rules_with(tmp_path, lambda d: d["engines"]["sglang"].pop(key))


@pytest.mark.parametrize("key", ["page_size", "batch_invariant_off", "attention_backend", "force_flashinfer"])
def test_a_missing_flag_is_a_load_error_naming_it(tmp_path, key):
    with pytest.raises(RulePackError, match=key):
        _rules_with(tmp_path, lambda d: d["engines"]["vllm"]["flags"].pop(key))


def test_an_ill_typed_spelling_table_is_a_load_error(tmp_path):
    with pytest.raises(RulePackError, match="kv_dtype_spelling"):
        _rules_with(tmp_path, lambda d: d["engines"]["vllm"].update(kv_dtype_spelling=["fp8"]))


def test_the_default_engine_is_named_by_the_data(tmp_path):
    with pytest.raises(RulePackError, match="default_engine"):
        _rules_with(tmp_path, lambda d: d.pop("default_engine"))


def test_an_adapter_layer_has_no_release_of_its_own(tmp_path):
    with pytest.raises(RulePackError, match="adapter"):
        _rules_with(tmp_path, lambda d: d["engines"]["sglang"].update(adapter=True))


def test_a_judge_without_its_data_is_a_load_error(tmp_path):
    with pytest.raises(RulePackError, match="own_backends_judged_by"):
        _rules_with(tmp_path, lambda d: d["engines"]["flashinfer"].update(own_backends_judged_by="verdict"))


def test_the_fix_flags_come_from_the_data(tmp_path):
    rs = default_ruleset()
    for name, layer in rs.engines.items():
        assert suggestion_flag(name, "page_size", 32, rs) == f"{layer.flags.page_size} 32"
        assert suggestion_flag(name, "batch_invariant", False, rs) == layer.flags.batch_invariant_off

    def renamed(d):
        d["engines"]["sglang"]["flags"]["page_size"] = "--kv-page"
        d["engines"]["sglang"]["kv_dtype_spelling"]["fp8"] = "fp8_e5m2"

    rs2 = _rules_with(tmp_path, renamed)
    assert suggestion_flag("sglang", "page_size", 32, rs2) == "--kv-page 32"
    assert suggestion_flag("sglang", "kv_cache_dtype", "fp8", rs2) == "--kv-cache-dtype fp8_e5m2"
    # an engine without a spelling table takes the config's own vocabulary; a dtype a table lacks has no flag
    assert suggestion_flag("flashinfer", "kv_cache_dtype", "fp8_e4m3", rs) == "--kv-cache-dtype fp8_e4m3"
    assert suggestion_flag("sglang", "kv_cache_dtype", "fp16", rs) is None

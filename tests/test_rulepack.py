"""Rule packs load whole or not at all (file and rule named); the shipped packs and device catalog."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from attnplan import policy
from attnplan.policy import RulePackError, UnknownDeviceError
from attnplan.policy.rulepack import load_ruleset
from attnplan.rules import BACKENDS_FILE, PACKS_DIR, pack_files

SPEC_RULE_IDS = [
    "device.cuda", "device.capability", "heads.gqa", "dtype.query", "head-size", "page-size", "fa3.arch",
    "fa3.dtype", "trtllm.family", "trtllm.cubins", "trtllm.batch-invariant", "trtllm.sm103-hang",
    "trtllm.kv-dtype", "trtllm.softcap", "kv.dtype", "kv.nvfp4-sm100f", "sinks",
]

GOOD_RULE = """\
  - id: {id}
    title: a test rule
    reason: tests
    source: tests
    backends: [fa2]
    require: {{fact: config.dtype, in: [fp16, bf16]}}
"""


def pack(pack_name: str, *rules: str) -> str:
    return f"pack: {pack_name}\nrules:\n" + "".join(rules)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def rule(id_: str, body: str) -> str:
    """A rule entry with the mandatory keys and ``body`` (YAML lines at rule indentation)."""
    lines = textwrap.dedent(body).strip("\n").splitlines()
    return (f"  - id: {id_}\n    title: t\n    reason: r\n    source: s\n"
            + "".join(f"    {ln}\n" for ln in lines))


def refused(paths, *, rule_id=None, file=None, words=()) -> RulePackError:
    with pytest.raises(RulePackError) as info:
        load_ruleset(list(paths), BACKENDS_FILE)
    err = info.value
    text = str(err)
    if file is not None:
        assert err.file == str(file)
        assert str(file) in text
    if rule_id is not None:
        assert err.rule == rule_id
        assert rule_id in text
    for w in words:
        assert w in text, (w, text)
    return err


# -- malformed packs ---------------------------------------------------------------------
def test_good_temp_pack_loads(tmp_path):
    p = write(tmp_path, "ok.yaml", pack("ok", GOOD_RULE.format(id="t.ok")))
    rs = load_ruleset([p], BACKENDS_FILE)
    assert [r.id for r in rs.rules] == ["t.ok"]
    assert rs.rule("t.ok").file == str(p)


def test_unknown_key_on_a_rule(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.extra", """
        backends: [fa2]
        require: {fact: config.dtype, eq: bf16}
        severity: high""")))
    refused([p], rule_id="t.extra", file=p, words=["severity"])


def test_unknown_key_in_a_check(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.check", """
        checks:
          - backends: [fa2]
            require: {fact: config.dtype, eq: bf16}
            sevrity: 1""")))
    refused([p], rule_id="t.check", file=p, words=["sevrity"])


def test_unknown_key_in_a_condition(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.op", "require: {fact: config.dtype, eqq: bf16}")))
    refused([p], rule_id="t.op", file=p, words=["eqq"])


def test_unknown_key_at_pack_level(tmp_path):
    p = write(tmp_path, "a.yaml", "pack: a\nrulez: []\nrules: []\n")
    refused([p], file=p, words=["rulez"])


def test_missing_required_rule_key(tmp_path):
    p = write(tmp_path, "a.yaml", "pack: a\nrules:\n  - id: t.nosource\n    title: t\n    reason: r\n"
                                  "    require: {fact: config.dtype, eq: bf16}\n")
    refused([p], rule_id="t.nosource", file=p, words=["source"])


def test_duplicate_id_within_a_file(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", GOOD_RULE.format(id="t.dup"), GOOD_RULE.format(id="t.dup")))
    refused([p], rule_id="t.dup", file=p, words=["duplicate"])


def test_duplicate_id_across_files(tmp_path):
    a = write(tmp_path, "a.yaml", pack("a", GOOD_RULE.format(id="t.same")))
    b = write(tmp_path, "b.yaml", pack("b", GOOD_RULE.format(id="t.same")))
    err = refused([a, b], rule_id="t.same", words=["duplicate"])
    # both files are named: the one refused and the one that had the id first
    assert str(a) in str(err) and str(b) in str(err)


def test_duplicate_of_a_shipped_rule_id(tmp_path):
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    extra = write(packs, "zz.yaml", pack("zz", GOOD_RULE.format(id="sinks")))
    refused(sorted(packs.glob("*.yaml")), rule_id="sinks", file=extra, words=["duplicate"])


@pytest.mark.parametrize("cond", [
    "{fact: config.head_size, eq: 1}",
    "{fact: node.gpu_arch, eq: 1}",
    "{fact: config.dtype, eq: {fact: config.nope}}",
    "{all: [{fact: config.dtype, eq: bf16}, {fact: cfg.dtype, eq: bf16}]}",
])
def test_unknown_fact_name(tmp_path, cond):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.fact", f"require: {cond}")))
    refused([p], rule_id="t.fact", file=p, words=["unknown fact"])


def test_unknown_fact_in_when(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.when", """
        when: {fact: config.is_mla2, eq: true}
        require: {fact: config.dtype, eq: bf16}""")))
    refused([p], rule_id="t.when", file=p, words=["config.is_mla2"])


@pytest.mark.parametrize("backends", ["[fa4]", "[fa2, trtllm]", "[FA2]"])
def test_unknown_backend(tmp_path, backends):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.be", f"""
        backends: {backends}
        require: {{fact: config.dtype, eq: bf16}}""")))
    refused([p], rule_id="t.be", file=p, words=["unknown backend"])


@pytest.mark.parametrize("spec", ["'>>0.6'", "'not a spec'", "'~=1'", "'=<0.7'"])
def test_bad_version_specifier(tmp_path, spec):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.ver", f"require: {{fact: node.flashinfer_version, version: {spec}}}")))
    refused([p], rule_id="t.ver", file=p, words=["specifier"])


@pytest.mark.parametrize("fixed", ["not-a-version", "'0.6.7 post2'", "'v1..2'"])
def test_bad_fixed_in(tmp_path, fixed):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.fixed", f"""
        fixed_in: {fixed}
        require: {{fact: config.dtype, eq: bf16}}""")))
    refused([p], rule_id="t.fixed", file=p, words=["fixed_in"])


def test_good_fixed_in_loads(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.fixed", """
        fixed_in: 0.6.7.post2
        require: {fact: config.dtype, eq: bf16}""")))
    assert load_ruleset([p], BACKENDS_FILE).rule("t.fixed").fixed_in == "0.6.7.post2"


@pytest.mark.parametrize("text", [
    "pack: a\nrules: [\n  - id: x\n",
    "pack: a\nrules:\n  - id: t.x\n   title: bad indent\n",
    "pack: [unclosed\n",
    "\tpack: a\n",
])
def test_invalid_yaml(tmp_path, text):
    p = write(tmp_path, "a.yaml", text)
    refused([p], file=p, words=["YAML"])


@pytest.mark.parametrize("cond", ["[a, b]", "just-a-string", "42", "{all: [1, 2]}", "{not: [x]}", "{}"])
def test_non_mapping_condition(tmp_path, cond):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.cond", f"require: {cond}")))
    refused([p], rule_id="t.cond", file=p)


@pytest.mark.parametrize("op", ["in", "not_in"])
def test_in_with_an_empty_list(tmp_path, op):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.in", f"require: {{fact: config.dtype, {op}: []}}")))
    refused([p], rule_id="t.in", file=p, words=[op])


def test_in_with_a_scalar(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.in", "require: {fact: config.dtype, in: bf16}")))
    refused([p], rule_id="t.in", file=p)


def test_empty_checks_list(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.nochecks", "checks: []")))
    refused([p], rule_id="t.nochecks", file=p)


def test_pair_scope_with_backends_refused(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", rule("t.pair", """
        scope: pair
        backends: [fa2]
        require: {fact: config.dtype, eq: bf16}""")))
    refused([p], rule_id="t.pair", file=p)


def test_bad_rule_id(tmp_path):
    p = write(tmp_path, "a.yaml", pack("a", GOOD_RULE.format(id="Bad_Id")))
    refused([p], rule_id="Bad_Id", file=p)


def test_empty_file_refused(tmp_path):
    p = write(tmp_path, "a.yaml", "")
    refused([p], file=p)


def test_a_bad_pack_refuses_the_whole_set(tmp_path):
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    bad = write(packs, "zz_bad.yaml", pack("zz", GOOD_RULE.format(id="t.good"),
                                           rule("t.bad", "require: {fact: config.nope, eq: 1}")))
    refused(sorted(packs.glob("*.yaml")), rule_id="t.bad", file=bad)
    with pytest.raises(RulePackError):
        policy.load_rules(packs)
    # the shipped rules are unaffected
    assert "t.good" not in {r.id for r in policy.default_ruleset().rules}


def test_load_rules_from_a_directory(tmp_path):
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    (packs / ".hidden.yaml").write_text("not: [valid")          # dotfiles are not packs
    rs = policy.load_rules(packs)
    assert {r.id for r in rs.rules} == {r.id for r in policy.default_ruleset().rules}
    assert rs.revision == policy.default_ruleset().revision


def test_backend_catalog_with_unknown_selection_backend(tmp_path):
    text = BACKENDS_FILE.read_text().replace("candidates: [trtllm-gen, fa2]}", "candidates: [trtllm-gen, fa9]}", 1)
    assert "fa9" in text
    cat = write(tmp_path, "backends.yaml", text)
    with pytest.raises(RulePackError) as info:
        load_ruleset(pack_files(PACKS_DIR), cat)
    assert info.value.file == str(cat) and "fa9" in str(info.value)


# -- the shipped packs -------------------------------------------------------------------
def test_shipped_packs_load():
    rs = policy.default_ruleset()
    assert len(rs.files) == len(pack_files(PACKS_DIR)) >= 3
    assert {Path(f).name for f in rs.files} >= {"core.yaml", "trtllm.yaml", "mla.yaml"}
    assert rs.revision and len(rs.revision) >= 8
    # loading the same files again gives the same revision (it is a hash of their text)
    assert load_ruleset(pack_files(PACKS_DIR), BACKENDS_FILE).revision == rs.revision


@pytest.mark.parametrize("rule_id", SPEC_RULE_IDS)
def test_every_spec_rule_id_exists(rule_id):
    r = policy.default_ruleset().rule(rule_id)
    assert r.checks and r.title and r.reason and r.source


def test_mla_rules_exist():
    ids = [r.id for r in policy.default_ruleset().rules]
    assert any(i.startswith("mla.") for i in ids)
    assert len(ids) == len(set(ids))


def test_answers_carry_the_rules_revision():
    a = policy.evaluate(policy.AttentionConfig(head_dim=128, num_qo_heads=8), policy.simulated_node("B200"))
    assert a.rules_revision == policy.default_ruleset().revision


def test_revision_changes_when_a_pack_text_changes(tmp_path):
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    before = load_ruleset(sorted(packs.glob("*.yaml")), BACKENDS_FILE).revision
    core = packs / "core.yaml"
    core.write_text(core.read_text() + "\n# a comment is a change of text too\n")
    after = load_ruleset(sorted(packs.glob("*.yaml")), BACKENDS_FILE).revision
    assert after != before
    core.write_text(core.read_text().replace("FlashInfer native kernels need capability 8.0-12.1",
                                             "FlashInfer native kernels need capability 8.0 - 12.1"))
    assert load_ruleset(sorted(packs.glob("*.yaml")), BACKENDS_FILE).revision not in (before, after)


def test_revision_changes_when_the_backend_catalog_changes(tmp_path):
    cat = write(tmp_path, "backends.yaml", BACKENDS_FILE.read_text() + "\n# changed\n")
    assert load_ruleset(pack_files(PACKS_DIR), cat).revision != policy.default_ruleset().revision


def test_load_rules_rereads_an_edited_directory(tmp_path):
    packs = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, packs)
    before = policy.load_rules(packs).revision
    (packs / "core.yaml").write_text((packs / "core.yaml").read_text() + "\n# edited\n")
    assert policy.load_rules(packs).revision != before


# -- device catalog ----------------------------------------------------------------------
ISSUE_DEVICES = {
    "B200": "10.0", "GB200": "10.0", "B300": "10.3", "GB300": "10.3",
    "RTX PRO 6000": "12.0", "RTX 5090": "12.0", "DGX Spark": "12.1", "Jetson Thor": "11.0",
    "H100": "9.0", "H200": "9.0", "GH200": "9.0", "H20": "9.0",
    "L40S": "8.9", "L4": "8.9", "RTX 4090": "8.9",
    "A100": "8.0", "A10": "8.6", "A40": "8.6", "RTX 3090": "8.6",
    "T4": "7.5", "V100": "7.0",
}


@pytest.mark.parametrize("name,cap", sorted(ISSUE_DEVICES.items()))
def test_catalog_has_every_issue_device(name, cap):
    dev = policy.catalog().get(name)
    assert dev.name == name
    assert dev.capability == cap
    assert dev.memory_gib > 0
    assert name in policy.catalog().names()
    node = policy.simulated_node(name)
    assert node.capability_str == cap
    assert node.gpu_name.value == name
    assert node.capability.source == policy.Source.declared


def test_catalog_gb10_is_dgx_spark():
    assert policy.catalog().get("GB10").name == "DGX Spark"
    assert policy.catalog().get("gb10").name == "DGX Spark"


@pytest.mark.parametrize("spelling,name", [
    ("rtx-pro-6000", "RTX PRO 6000"), ("rtxpro6000", "RTX PRO 6000"), ("Rtx Pro 6000", "RTX PRO 6000"),
    ("RTX_PRO_6000", "RTX PRO 6000"), ("gb10", "DGX Spark"), ("dgx-spark", "DGX Spark"), ("DGXSPARK", "DGX Spark"),
    ("b200", "B200"), ("Gb-300", "GB300"), ("h 100", "H100"), ("rtx5090", "RTX 5090"), ("jetson-thor", "Jetson Thor"),
    ("l40s", "L40S"), ("  a100  ", "A100"),
])
def test_catalog_names_ignore_case_spaces_dashes(spelling, name):
    assert policy.catalog().get(spelling).name == name
    assert policy.simulated_node(spelling).gpu_name.value == name


@pytest.mark.parametrize("name,close", [("B2000", "B200"), ("RTX 5080", "RTX 5090"), ("H1000", "H100"),
                                        ("rtx pro 600", "RTX PRO 6000")])
def test_unknown_device_has_close_matches(name, close):
    with pytest.raises(UnknownDeviceError) as info:
        policy.catalog().get(name)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, policy.InvalidInputError)
    assert err.field == "device"
    assert close in err.close
    assert name in str(err) and close in str(err)


def test_unknown_device_without_close_match_lists_known():
    with pytest.raises(UnknownDeviceError) as info:
        policy.simulated_node("zzzz")
    assert info.value.close == []
    assert "B200" in str(info.value) and "H100" in str(info.value)


def test_simulated_node_capability_contradiction():
    with pytest.raises(policy.InvalidInputError) as info:
        policy.simulated_node("B200", capability="10.3")
    assert info.value.field == "capability"


def test_shipped_rule_texts_are_whole():
    """An unquoted `` #`` in YAML starts a comment: ``source: seed 002 (vLLM #38822)`` once loaded
    as ``seed 002 (vLLM``. Every shipped title, reason and source keeps its brackets balanced."""
    ruleset = policy.default_ruleset()
    for r in ruleset.rules:
        for text in (r.title, r.reason, r.source, r.fix or ""):
            assert text.count("(") == text.count(")"), (r.id, text)
    by_id = {r.id: r for r in ruleset.rules}
    assert "#38822" in by_id["head-size"].source and "#43669" in by_id["kv.nvfp4-sm100f"].source
    assert "#2939" in by_id["trtllm.sm103-hang"].source and "#40153" in by_id["vllm.sinks"].source


# -- v2: layers, version ranges and provenance are validated data ---------------------------
@pytest.mark.parametrize("body,words", [
    ("layer: kernel\nvllm: '>=0.33'\nrequire: {fact: config.dtype, eq: bf16}", ["kernel rule has no vllm range"]),
    ("layer: engine\nflashinfer: '>=0.7'\nrequire: {fact: config.dtype, eq: bf16}", ["engine rule has no flashinfer range"]),
    ("layer: vendor\nrequire: {fact: config.dtype, eq: bf16}", ["layer"]),
    ("layer: engine\nvllm: 'not a spec'\nrequire: {fact: config.dtype, eq: bf16}", ["not a version specifier"]),
    ("verified: {source_only: ''}\nrequire: {fact: config.dtype, eq: bf16}", ["source_only"]),
    ("verified: [{device: H100, capability: '9.0', flashinfer: 0.7.2, date: 2026-11, verdict: maybe}]\n"
     "require: {fact: config.dtype, eq: bf16}", ["verdict"]),
])
def test_layer_range_and_provenance_are_validated(tmp_path, body, words):
    f = write(tmp_path, "p.yaml", pack("p", rule("bad.rule", body)))
    refused([f], rule_id="bad.rule", file=f, words=words)


def test_every_shipped_rule_says_its_layer_range_and_provenance():
    rs = policy.default_ruleset()
    for r in rs.rules:
        assert r.layer in ("kernel", "engine")
        assert r.verified is not None, r.id
        if r.layer == "engine" and r.engine in (None, "vllm"):
            # a range inside what the vLLM layer models (issue 42: 0.31.0-0.33.x), naming at least one release
            from packaging.specifiers import SpecifierSet

            rng = SpecifierSet(r.vllm)
            assert r.id.startswith("vllm.") and any(v in rng for v in rs.engines["vllm"].versions), r.id
            assert not any(v in rng for v in ("0.30.9", "0.34.0")), r.id
        elif r.layer == "engine":  # another engine's pack (issue 26): its own range, its name as prefix
            assert r.versions and r.id.startswith(f"{r.engine}."), r.id
    # every trtllm-gen rule is source-only until a Blackwell GPU verifies it (issue 13)
    for rid in ("trtllm.family", "trtllm.cubins", "trtllm.kv-dtype", "trtllm.sm103-hang", "mla.family"):
        assert rs.rule(rid).provenance().startswith("source only"), rid
    assert "consistent on H100 (9.0, flashinfer 0.7.2.post1" in rs.rule("kv.dtype").provenance()


def test_catalog_engine_selection_must_name_known_backends(tmp_path):
    text = BACKENDS_FILE.read_text().replace("candidates: [xqa, fa2]", "candidates: [xqb, fa2]", 1)
    cat = write(tmp_path, "backends.yaml", text)
    with pytest.raises(RulePackError) as info:
        load_ruleset(pack_files(PACKS_DIR), cat)
    assert "engines.vllm.selection.standard.decode" in str(info.value) and "xqb" in str(info.value)


def test_catalog_backend_without_a_call_for_a_phase_is_refused(tmp_path):
    text = BACKENDS_FILE.read_text().replace(
        "      decode: {call: xqa_decode, entry_point: flashinfer.decode.trtllm_batch_decode_with_kv_cache, returns_lse: false}\n",
        "      {}\n", 1).replace("    calls:\n      {}\n", "    calls: {}\n", 1)
    cat = write(tmp_path, "backends.yaml", text)
    with pytest.raises(RulePackError) as info:
        load_ruleset(pack_files(PACKS_DIR), cat)
    assert "xqa" in str(info.value) and "no call" in str(info.value)

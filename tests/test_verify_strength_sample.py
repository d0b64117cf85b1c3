"""Beyond pairs (issue 38): the covering's strength is a parameter and covers every t-tuple of the
factors each JIT family compiles in; ``--sample`` draws accepted configurations uniformly, per seed;
``attnplan verify --sweep/--sample`` says what it is doing before its slow part (issue 40 class 9);
the exhaustive XQA enumeration holds only what the packs accept, plus the refusals it confirms."""

from __future__ import annotations

import argparse
import itertools
import textwrap

import pytest

from attnplan.policy import AttentionConfig, default_ruleset, simulated_node
from attnplan.policy.rulepack import load_ruleset
from attnplan.rules import BACKENDS_FILE
from attnplan.verify import sweep as sw
from attnplan.verify.generate import Target, refusals
from attnplan.verify.sweep import SweepTarget, combos, compiled_factors, config_of, cover, sample

NODE = simulated_node("H100")
T = SweepTarget("fa2", "decode", False, False)
PACK = textwrap.dedent("""\
    pack: t
    rules:
      - id: t.head
        title: t
        reason: t
        source: test
        backends: [fa2]
        when: {fact: config.is_mla, eq: false}
        require: {fact: config.head_dim, in: [64, 128]}
      - id: t.kv
        title: t
        reason: t
        source: test
        backends: [fa2]
        when: {fact: config.kv_dtype, in: [fp16, bf16]}
        require: {fact: config.kv_dtype, eq: {fact: config.dtype}}
      - id: t.three
        title: a cut that needs three compiled factors at once (head 128 x fp8 x window), as XQA's did
        reason: t
        source: test
        backends: [fa2]
        when: {all: [{fact: config.head_dim, eq: 128}, {fact: config.kv_dtype, eq: fp8_e4m3}]}
        require: {fact: config.sliding_window, is_null: true}
    """)
# A small space, so that the accepted configs can be enumerated by brute force.
SMALL = [("head", ((64, 64), (128, 128), (96, 96))), ("group", (1, 4)), ("dtype", ("fp16", "bf16")),
         ("kv", ("fp16", "bf16", "fp8_e4m3")), ("page", (8, 16)), ("window", (None, 64)), ("soft_cap", (None, 30.0)),
         ("spec", (0, 1)), ("shape", ("b1-short", "b1-long"))]


@pytest.fixture(scope="module")
def rs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pack")
    (d / "t.yaml").write_text(PACK)
    # The pack alone (load_ruleset): the shipped loader also wants every engine's own rules.
    return load_ruleset([d / "t.yaml"], BACKENDS_FILE)


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(sw, "factors", lambda t: list(SMALL))
    monkeypatch.setattr(sw, "sample_factors", lambda t: list(SMALL))


def _ok(rs, row) -> bool:
    try:
        config = AttentionConfig.model_validate(config_of(T, row))
    except ValueError:
        return False
    return refusals(list(rs.rules), config, NODE, T.base) == ()


def _accepted_rows(rs) -> list[dict]:
    names = [n for n, _ in SMALL]
    rows = [dict(zip(names, vals)) for vals in itertools.product(*(d for _, d in SMALL))]
    return [r for r in rows if _ok(rs, r)]


def test_combinations_are_every_pair_and_every_t_tuple_of_the_compiled_factors():
    names = [n for n, _ in SMALL]
    strong = compiled_factors(T, names)
    assert strong == ["head", "dtype", "kv", "window", "soft_cap"]        # group, page, spec: run arguments of fa2
    assert compiled_factors(SweepTarget("xqa", "decode", False, None), names) == [
        "head", "group", "dtype", "kv", "page", "window", "spec"]          # XQA compiles them in (gen_xqa_module)
    two, three = combos(names, strong, 2), combos(names, strong, 3)
    assert set(two) == set(itertools.combinations(names, 2))
    assert set(three) - set(two) == set(itertools.combinations(strong, 3))
    assert not any(len(c) == 3 and "page" in c for c in three)
    with pytest.raises(ValueError):
        combos(names, strong, 1)


@pytest.mark.parametrize("strength", [2, 3])
def test_strength_t_holds_every_reachable_t_tuple_of_the_compiled_factors(rs, small, strength):
    names = [n for n, _ in SMALL]
    cov = cover(rs, NODE, T, seed=0, strength=strength)
    assert cov.strength == strength and cov.rows and all(_ok(rs, r) for r in cov.rows)
    cs = combos(names, compiled_factors(T, names), strength)
    reachable = {tuple((n, r[n]) for n in c) for r in _accepted_rows(rs) for c in cs}
    held = {tuple((n, r[n]) for n in c) for r in cov.rows for c in cs}
    assert reachable <= held
    # What is refused is exactly what no accepted config holds (brute force over the small space).
    assert set(cov.refused) == {tuple(zip(c, v)) for c in cs for v in itertools.product(*(dict(SMALL)[n] for n in c))} - reachable
    if strength == 3:
        # The three-factor cut: head 128 x fp8 x window is refused, its pairs are all held.
        cut = (("head", (128, 128)), ("kv", "fp8_e4m3"), ("window", 64))
        assert cut in cov.refused
        assert all(p in held for p in itertools.combinations(cut, 2))


def test_strength_two_is_the_pairwise_covering_unchanged(rs, small):
    a = cover(rs, NODE, T, seed=5)
    b = cover(rs, NODE, T, seed=5, strength=2)
    assert a.rows == b.rows and a.refused == b.refused


def test_sample_is_reproducible_per_seed_and_draws_only_accepted_configs(rs):
    a = sample(rs, NODE, 25, seed=7, only=["fa2/decode"])
    b = sample(rs, NODE, 25, seed=7, only=["fa2/decode"])
    c = sample(rs, NODE, 25, seed=8, only=["fa2/decode"])
    assert [p.id for p in a.probes] == [p.id for p in b.probes] and len(a.probes) == 25
    assert [p.id for p in a.probes] != [p.id for p in c.probes]
    for p in a.probes:
        config = AttentionConfig.model_validate(p.config)
        assert refusals(list(rs.rules), config, NODE, Target("fa2", "decode", False)) == ()
        assert p.boundaries[0].rule == "sample" and p.spec["sweep_target"] in ("fa2/decode", "fa2/decode+sinks")
    # Not the covering's grid: groups it never names are drawn.
    assert {p.boundaries[0].changed["group"] for p in a.probes} - set(sw.GROUPS)
    assert a.drawn >= 25


def test_sample_reaches_every_accepted_config_and_nothing_else(rs, small):
    # Drawn with replacement and deduplicated: asking for more than there are returns the whole
    # accepted set of the (small) space - its support is exactly what the rules accept.
    accepted = _accepted_rows(rs)
    got = sample(rs, NODE, 10_000, seed=1, only=["fa2/decode"], max_draws=60_000)
    keys = {tuple(sorted((k, str(v)) for k, v in p.boundaries[0].changed.items())) for p in got.probes
            if p.spec["sweep_target"] == "fa2/decode"}
    want = {tuple(sorted((k, str(list(v) if isinstance(v, tuple) else v)) for k, v in r.items())) for r in accepted}
    assert keys == want


def test_sample_weights_targets_by_their_space(rs, small):
    # Two targets of equal space (fa2/decode with and without sinks): drawn about equally often.
    both = ["fa2/decode", "fa2/decode+sinks"]
    got = sample(rs, NODE, 0, seed=3, only=both)
    assert got.space == {"fa2/decode": got.space["fa2/decode"], "fa2/decode+sinks": got.space["fa2/decode"]}
    many = sample(rs, NODE, 200, seed=3, only=both)
    n = many.per_target
    assert abs(n["fa2/decode"] - n["fa2/decode+sinks"]) < 60, n


def _cli(argv):
    from attnplan.cli import verify

    parser = argparse.ArgumentParser()
    verify.add_parser(parser.add_subparsers())
    args = parser.parse_args(["verify", *argv])
    return args.run(args)


@pytest.mark.parametrize("mode", [["--sweep", "--target", "fa2/prefill"], ["--sample", "3"]])
def test_progress_is_printed_before_the_rules_load_and_the_generation(monkeypatch, capsys, mode):
    # Issue 40 class 9: > 10 s of silence on a 2-core machine before the first line. The slow part
    # (rules, the node's facts, the generation) starts only after a line on stderr says so.
    from attnplan.cli import verify

    seen = {}
    real_rules = verify.ruleset_from_args

    def rules(args):
        seen["before_rules"] = capsys.readouterr().err
        return real_rules(args)

    real_sweep, real_sample = sw.sweep, sw.sample

    def gen(real):
        def wrapped(*a, **k):
            seen["before_generation"] = capsys.readouterr().err
            return real(*a, **k)
        return wrapped

    monkeypatch.setattr(verify, "ruleset_from_args", rules)
    monkeypatch.setattr(sw, "sweep", gen(real_sweep))
    monkeypatch.setattr(sw, "sample", gen(real_sample))
    assert _cli([*mode, "--list", "--device", "H100"]) == 0
    what = "covering sweep" if "--sweep" in mode else "uniform sample of 3"
    assert seen["before_rules"].startswith("verify ") and f"generating the {what}" in seen["before_rules"]
    assert "capability 9.0" in seen["before_generation"]
    assert capsys.readouterr().out.count('"id"') >= 1


def test_cli_refuses_a_strength_below_two_and_a_sample_with_sweep():
    from attnplan.policy import InvalidInputError

    with pytest.raises(InvalidInputError):
        _cli(["--sweep", "--strength", "1", "--list", "--device", "H100"])
    with pytest.raises(InvalidInputError):
        _cli(["--sweep", "--sample", "3", "--list", "--device", "H100"])


# -- the exhaustive XQA enumeration ------------------------------------------------------------
@pytest.fixture(scope="module")
def xqa():
    from attnplan.verify.exhaustive import xqa_modules

    rs = default_ruleset()
    return rs, xqa_modules(rs, NODE, spec_tokens=(0, 1))


def test_exhaustive_xqa_holds_exactly_what_the_packs_accept_plus_the_confirmations(xqa):
    from attnplan.verify.exhaustive import XQA_PAGES

    from attnplan.verify.select import is_kernel_rule

    rs, mods = xqa
    rules = [r for r in rs.rules if is_kernel_rule(r)]      # kernel truth: engine rules are policy
    t = Target("xqa", "decode", False)
    for m in mods[::37]:              # a spread of them (each judged by the engine's own refusals)
        got = refusals(rules, AttentionConfig.model_validate(m.config()), NODE, t)
        assert (got == ()) == m.accepted, m
    refused = [m for m in mods if not m.accepted]
    assert refused and all(m.kv == "fp8_e4m3" and m.group == 32 and m.head > 128 and "xqa.group" in m.refused_by
                           for m in refused)
    acc = [m for m in mods if m.accepted]
    # Every compiled value the packs accept is there: groups 1-16, 25-32, 57-64 over a 16-bit cache,
    # 1-16 and 32 over fp8; every page size XQA compiles; q_len 1 and 2; window off and on.
    assert {m.group for m in acc if m.kv == "bf16"} == set(range(1, 17)) | set(range(25, 33)) | set(range(57, 65))
    assert {m.group for m in acc if m.kv == "fp8_e4m3"} == set(range(1, 17)) | {32}
    assert {m.page for m in acc} == set(XQA_PAGES) and {m.spec for m in acc} == {0, 1} and {m.window for m in acc} == {False, True}
    assert not [m for m in acc if m.kv == "fp8_e4m3" and m.group == 32 and m.head > 128]
    # One module per compiled combination (the page is compiled in too, so one page per row).
    keys = [(m.kv, m.dtype, m.head, m.group, m.window, m.spec) for m in mods]
    assert len(keys) == len(set(keys))
    # Tiers: the confirmations, then fp8 (bf16 query, fp16 query), fp8 speculative, 16-bit.
    assert [m.tier for m in mods] == sorted(m.tier for m in mods)


def test_exhaustive_xqa_probes_share_their_module_and_carry_the_draft_length(xqa):
    from attnplan.verify.exhaustive import KV_LENS, xqa_probes

    rs, mods = xqa
    spec_mod = next(m for m in mods if m.accepted and m.spec == 1 and m.window)
    probes = xqa_probes(rs, NODE, [spec_mod])
    assert len(probes) == 2 and probes[0].module == probes[1].module
    plain, variant = probes
    assert plain.spec["call"] == "xqa_decode" and plain.spec["q_len"] == 2
    assert plain.spec["q_lens"] == [2] * len(KV_LENS) and plain.spec["kv_lens"] == list(KV_LENS)
    assert variant.spec["sinks"] and variant.config["sliding_window"] > plain.config["sliding_window"]
    assert plain.boundaries[0].rule == "exhaustive" and plain.boundaries[0].side == "accept"

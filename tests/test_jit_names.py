"""sink.jit-name: FlashInfer names its attention-sink module by query dtype, window and backend
alone (flashinfer/attention/_core.py BatchAttentionWithAttentionSinkWrapper.__init__), so two
layer groups whose sink modules differ in head size or KV dtype would load one library
(bench/logs/h100-2026-11-25c: built side by side, the 64- and 256-wide modules ran the 128-wide
one's kernel). Checked over the plans phase_plan really makes, and through plan_model."""

from __future__ import annotations

import json

from attnplan import policy
from attnplan.policy import AttentionConfig, simulated_node
from attnplan.model import plan as mp
from attnplan.policy.jit_names import clashes, jit_name
from attnplan.render.verdict import finish
from attnplan.model.layers import LayerGroup, ModelLayers
from attnplan.policy.shipped import default_ruleset
from attnplan.presets import PRESETS_DIR

H100 = simulated_node("H100")
RS = default_ruleset()


def plans(*configs: dict) -> list:
    """(group index, phase plan) of each config's accepted plan under the kernel layer alone."""
    out = []
    for i, kw in enumerate(configs):
        a = policy.plan_for(AttentionConfig(**{"num_qo_heads": 16, "num_kv_heads": 2, **kw}), H100, engine="flashinfer")
        assert a.ok, a.violations
        out += [(i, a.plan.prefill), (i, a.plan.decode)]
    return out


def test_sink_modules_of_two_head_sizes_clash_under_one_name():
    ps = plans(dict(head_dim=64, sinks=True), dict(head_dim=128, sinks=True))
    names = {jit_name(RS, pp.call, pp.modules[0]) for _, pp in ps}
    assert all(n and n.startswith("attention_sink:") for n in names)
    vs = clashes(RS, ps)
    assert vs and all(v.rule == "sink.jit-name" for v in vs)
    assert len(vs) == len(names)                               # one per name the two groups share
    v = finish(vs[0])   # the planner leaves data (Violation.says); render/notes.py writes the message
    assert v.fact == "head_dim_qk, head_dim_vo"
    assert {o["head_dim_qk"] for o in v.observed} == {64, 128}
    assert "groups 0" in v.message and "groups 1" in v.message and "one library" in v.message


def test_sink_modules_of_two_kv_dtypes_clash_one_with_a_window_does_not():
    vs = clashes(RS, plans(dict(head_dim=128, sinks=True), dict(head_dim=128, sinks=True, kv_cache_dtype="fp8")))
    assert vs and all(v.fact == "dtype_kv" for v in vs)
    # a window is part of the name: a sliding and a full group never clash (gpt-oss)
    assert clashes(RS, plans(dict(head_dim=64, sinks=True), dict(head_dim=128, sinks=True, sliding_window=128))) == []


def test_alike_modules_and_fully_named_calls_do_not_clash():
    assert clashes(RS, plans(dict(head_dim=64, sinks=True), dict(head_dim=64, sinks=True))) == []
    ps = plans(dict(head_dim=64), dict(head_dim=128))              # paged prefill/decode name their head size
    assert all(jit_name(RS, pp.call, pp.modules[0]) is None for _, pp in ps)
    assert clashes(RS, ps) == []


def test_plan_model_rejects_a_model_whose_sink_groups_clash(monkeypatch):
    base = json.loads((PRESETS_DIR / "gpt-oss-120b.json").read_text())
    real = mp.read_layers(base)
    ok = mp.plan_model(base, H100, engine="flashinfer")
    assert not [v for v in ok.violations if v.rule == "sink.jit-name"]  # sliding and full: named apart

    def two_heads(data):
        g = [x for x in real.groups if x.is_attention][0]
        return ModelLayers(model_type=real.model_type, num_layers=real.num_layers, groups=(
            LayerGroup(**{**g.model_dump(), "layers": tuple(range(0, real.num_layers, 2))}),
            LayerGroup(**{**g.model_dump(), "layers": tuple(range(1, real.num_layers, 2)), "head_dim_qk": 128,
                          "head_dim_vo": 128, "sm_scale": 128 ** -0.5})))
    monkeypatch.setattr(mp, "read_layers", two_heads)
    bad = mp.plan_model(base, H100, engine="flashinfer")
    assert bad.status == "rejected"
    v = [v for v in bad.violations if v.rule == "sink.jit-name"]
    assert v and "head_dim_qk" in v[0].fact
    assert all(g.status == "ok" for g in bad.layer_groups)     # each group alone runs


def test_attnplan_rules_lists_the_model_level_rule_with_its_measurement(capsys, monkeypatch):
    from attnplan.cli.main import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert "sink.jit-name  [kernel]" in out and "head_dim_qk" in out and "H100 0.7.2.post1 2026-11-25 dangerous" in out
    assert max(len(ln) for ln in out.splitlines()) <= 80
    assert main(["rules", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["model_rules"]
    assert [r["id"] for r in m] == ["sink.jit-name"]
    assert m[0]["named_by"] == ["dtype_q", "sliding_window"] and "head_dim_vo" in m[0]["compiled"]
    assert m[0]["verified"][0]["device"] == "H100"


def test_a_source_only_model_rule_is_listed_as_read_from_source():
    """A jit_name whose ``verified:`` is source-only (never measured) is listed with its reason,
    as a pack rule would be, by the text and the JSON of ``attnplan rules``."""
    import dataclasses

    from attnplan.cli.plan import model_rules_text
    from attnplan.policy.rulepack import SourceOnly
    from attnplan.render.tables import model_rules

    sink = RS.calls["sink"]
    unmeasured = sink.jit_name.model_copy(update={"verified": SourceOnly(source_only="read from _core.py only")})
    rs = dataclasses.replace(RS, calls={**RS.calls, "sink": sink.model_copy(update={"jit_name": unmeasured})})
    text = model_rules_text(rs, None, 80)
    assert "verified: source only: read from _core.py only" in text and "sink.jit-name" in text
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert model_rules(rs)[0]["verified"] == {"source_only": "read from _core.py only"}

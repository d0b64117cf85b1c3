"""``attnplan upgrade`` and attnplan/upgrade.py (issue 42 item 3): one deployment under two releases, compared.

Every expectation is built from two answers computed independently with the public API (plan_model,
plan_serve, plan_launch under each release), never written down. Until the rules model a second vLLM
release, the engine-release tests use a rule set variant: a temp copy of the packs with one rule's vLLM
range narrowed to one of two releases the rules accept (the newest modelled one, and the one before it or,
while one is modelled, a later patch release inside the covered range).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import get_args

import pytest
import yaml

from attnplan.cli.main import main as cli_main
from attnplan.policy import InvalidInputError, default_ruleset, load_rules, simulated_node
from attnplan.model import plan_model
from attnplan.policy.answer import Outcome
from attnplan.policy.engines import engine_names, parse_engine
from attnplan.upgrade import (SEVERITY, Side, Target, diff_deployment, involved, model_planner, parse_sides,
                                     rules_changed, severity, upgrade, worse)
from attnplan.rules import PACKS_DIR

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "attnplan" / "presets"
LLAMA = str(PRESETS / "llama-3.1-8b.json")
GEMMA = str(PRESETS / "gemma-2-9b.json")
NARROWED = "vllm.softcap-dropped"   # a silent-wrong vLLM rule Gemma-2 (soft cap) meets on 10.x


def two_releases(rs) -> tuple[str, str]:
    """Two vLLM releases the rules accept: (older, newest modelled)."""
    from packaging.version import Version

    versions = rs.engines["vllm"].versions
    if len(versions) >= 2:
        return versions[-2], versions[-1]
    v = Version(versions[-1])
    later = f"{v.major}.{v.minor}.{v.micro + 1}"
    parse_engine(f"vllm=={later}", rs)  # inside the covered range, or this helper must change: fail loudly
    return versions[-1], later


def narrowed(tmp_path: Path, rule_id: str, spec: str) -> Path:
    """A copy of the shipped packs with ``rule_id``'s vLLM range set to ``spec``."""
    d = tmp_path / "packs"
    shutil.copytree(PACKS_DIR, d)
    for f in sorted(d.glob("*.yaml")):
        data = yaml.safe_load(f.read_text())
        for r in data.get("rules", []):
            if r.get("id") == rule_id:
                r.pop("versions", None)
                r["vllm"] = spec
                f.write_text(yaml.safe_dump(data, sort_keys=False))
                return d
    raise AssertionError(f"no rule {rule_id}")


@pytest.fixture
def variant(tmp_path):
    """(rule set, older, newer): NARROWED speaks for the newer release only."""
    shipped = default_ruleset()
    old, new = two_releases(shipped)
    d = narrowed(tmp_path, NARROWED, f"=={new}")
    return load_rules(d), old, new, d


def outcome(a) -> str:
    return a.verdict.outcome if a.verdict is not None else "runs"


# -- the order -------------------------------------------------------------------------------------
def test_severity_ranks_every_verdict_outcome_runs_first():
    assert set(SEVERITY) == set(get_args(Outcome)) and len(SEVERITY) == len(get_args(Outcome))
    assert SEVERITY[0] == "runs"
    for o in SEVERITY[1:]:
        assert worse("runs", o) and not worse(o, "runs") and severity(o) > severity(None)


# -- the sides -------------------------------------------------------------------------------------
@pytest.mark.parametrize("frm,to,field", [
    ("vllm==0.33.0", "vllm==0.33", "to"),                 # the same release, spelled twice
    ("vllm==0.1.0", "vllm==0.33.0", "from"),              # not modelled
    ("vllm==0.33.0", "sglang==0.5.23", "to"),             # two engines: compare, not upgrade
    ("flashinfer==0.6.7", "vllm==0.33.0", "to"),          # two layers at once
    ("vllm", "vllm==0.33.0", "from"),                     # no release named
    ("flashinfer==0.6.7", "flashinfer==latest", "to"),    # not a version
    ("flashinfer==0.7.2.post1", "flashinfer==0.7.2.post1", "to"),
    ("", "vllm==0.33.0", "from"),
])
def test_bad_sides_name_the_field(frm, to, field):
    with pytest.raises(InvalidInputError) as exc:
        parse_sides(frm, to, default_ruleset())
    assert exc.value.field == field


def test_an_unmodelled_release_names_the_modelled_ones():
    rs = default_ruleset()
    with pytest.raises(InvalidInputError) as exc:
        parse_sides("vllm==0.1.0", f"vllm=={rs.engines['vllm'].versions[-1]}", rs)
    assert exc.value.allowed == engine_names(rs)
    assert all(f"vllm=={v}" in str(exc.value) for v in rs.engines["vllm"].versions)


def test_an_engine_upgrade_names_its_engine():
    rs = default_ruleset()
    newest = rs.engines["vllm"].versions[-1]
    with pytest.raises(InvalidInputError) as exc:
        parse_sides("vllm==0.1.0", f"vllm=={newest}", rs, "sglang")
    assert exc.value.field == "from"   # the release is checked first
    old, new = two_releases(rs)
    with pytest.raises(InvalidInputError) as exc:
        parse_sides(f"vllm=={old}", f"vllm=={new}", rs, "sglang")
    assert exc.value.field == "engine"
    a, b = parse_sides(f"vllm=={old}", f"vllm=={new}", rs, "vllm")
    assert (a.engine.version, b.engine.version) == (old, new)


def test_a_flashinfer_upgrade_is_planned_under_an_engine():
    rs = default_ruleset()
    a, b = parse_sides("flashinfer==0.6.7", "flashinfer==0.7.2.post1", rs, "sglang")
    assert (a.engine.name, a.flashinfer, b.flashinfer) == ("sglang", "0.6.7", "0.7.2.post1")
    with pytest.raises(InvalidInputError) as exc:
        parse_sides("flashinfer==0.6.7", "flashinfer==0.7.2.post1", rs, "flashinfer")
    assert exc.value.field == "engine"


# -- engine releases: the rule set variant -------------------------------------------------------------
def test_engine_upgrade_is_the_difference_of_two_independent_answers(variant):
    rs, old, new, _ = variant
    node = simulated_node("B200")
    a, b = parse_sides(f"vllm=={old}", f"vllm=={new}", rs)
    rep = upgrade(rs, a, b, {"gemma": model_planner(GEMMA, rs)}, [Target("B200", node)])
    before = plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={old}")
    after = plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={new}")
    ob, oa = outcome(before), outcome(after)
    assert ob != oa, "the narrowed rule must change this deployment, or the test proves nothing"

    d, = rep.deployments
    assert (d.before.outcome, d.after.outcome) == (ob, oa)
    assert d.worse == (SEVERITY.index(oa) > SEVERITY.index(ob)) and rep.exit_code() == int(d.worse)
    change = next(c for c in d.changes if c.what == "outcome")
    assert (change.before, change.after) == (ob, oa)
    if "wrong-output" in (ob, oa):
        assert change.effect == "silent-output"
    rule = rs.rule(NARROWED)
    ref = next(r for r in change.rules if r.id == NARROWED)
    assert (ref.applies_before, ref.applies_after) == (rule.applies("vllm", old, None), rule.applies("vllm", new, None))
    assert ref.source == rule.source and ref.range == f"=={new}"
    # the release notes: every rule whose range covers one release and not the other - engine rules by the vLLM
    # release, kernel rules by the flashinfer each release pins (a declared node gets the pin: release_node)
    from attnplan.policy.answer import EngineRef
    from attnplan.policy.engines import flashinfer_pin

    fo, fn = (flashinfer_pin(rs, EngineRef(name="vllm", version=v)) for v in (old, new))
    assert [r.id for r in rep.rules_changed] == [r.id for r in rs.rules
                                                 if r.applies("vllm", old, fo) != r.applies("vllm", new, fn)]
    # per attention layer group, the groups' own answers
    assert [g.group.split(" layers")[0] for g in d.groups] == [g.kind for g in after.attention_groups]
    for g, gb, ga in zip(d.groups, before.attention_groups, after.attention_groups):
        assert (g.outcome_before, g.outcome_after) == (outcome(gb.answer), outcome(ga.answer))
        for ph in ("prefill", "decode"):
            sb, sa = getattr(gb.answer.verdict.selected, ph), getattr(ga.answer.verdict.selected, ph)
            got = [c for c in g.changes if c.what == "selected" and c.phase == ph]
            assert got == [] if sb == sa else [(c.before, c.after) for c in got] == [(sb, sa)]


def test_the_reverse_upgrade_is_the_mirror(variant):
    rs, old, new, _ = variant
    node = simulated_node("B200")
    fwd = upgrade(rs, *parse_sides(f"vllm=={old}", f"vllm=={new}", rs), {"g": model_planner(GEMMA, rs)}, [Target("B200", node)])
    back = upgrade(rs, *parse_sides(f"vllm=={new}", f"vllm=={old}", rs), {"g": model_planner(GEMMA, rs)}, [Target("B200", node)])
    f, b = fwd.deployments[0], back.deployments[0]
    assert (f.before.outcome, f.after.outcome) == (b.after.outcome, b.before.outcome)
    assert f.worse != b.worse  # the outcome differs (the test above), so exactly one direction is worse
    assert {(r.id, r.applies_before, r.applies_after) for r in fwd.rules_changed} == \
        {(r.id, r.applies_after, r.applies_before) for r in back.rules_changed}


def test_a_deployment_the_rules_do_not_touch_is_unchanged(variant):
    rs, old, new, _ = variant
    node = simulated_node("H100")   # the narrowed rule reads 10.x only

    def facts(m):
        return [(outcome(g.answer), g.answer.verdict.selected, g.answer.backends(),
                 g.answer.plan.kv_cache.page_size if g.answer.plan else None) for g in m.attention_groups]

    before = plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={old}")
    after = plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={new}")
    rep = upgrade(rs, *parse_sides(f"vllm=={old}", f"vllm=={new}", rs), {"gemma": model_planner(GEMMA, rs)},
                  [Target("H100", node)])
    d, = rep.deployments
    kinds = {c.what for c in (*d.changes, *(c for g in d.groups for c in g.changes))}
    if facts(before) == facts(after):
        assert not d.worse and not kinds & {"outcome", "selected", "flashinfer-backend", "page-size"}
    else:
        assert kinds & {"outcome", "selected", "flashinfer-backend", "page-size"}


# -- the diff logic on two answers that really differ: one model on two GPUs -----------------------------------
def test_two_gpus_diff_names_every_phase_change():
    rs = default_ruleset()
    side = Side(parse_engine("vllm", rs))
    before = plan_model(LLAMA, simulated_node("H100"), engine="vllm")
    after = plan_model(LLAMA, simulated_node("B200"), engine="vllm")
    d = diff_deployment(rs, side, side, before, after, deployment="llama", device="H100 -> B200")
    g, = d.groups
    ab, aa = before.attention_groups[0].answer, after.attention_groups[0].answer
    for ph in ("prefill", "decode"):
        pb, pa = getattr(ab.plan, ph), getattr(aa.plan, ph)
        for what, x, y in (("flashinfer-backend", pb.backend, pa.backend), ("query-dtype", pb.query_dtype, pa.query_dtype),
                           ("selected", getattr(ab.verdict.selected, ph), getattr(aa.verdict.selected, ph))):
            got = [(c.before, c.after) for c in g.changes if c.what == what and c.phase == ph]
            assert got == ([] if x == y else [(x, y)]), (what, ph)
        got = [c for c in g.changes if c.what == "kernel" and c.phase == ph]
        assert bool(got) == ((pb.kernel, pb.kernel_table, pb.cubins) != (pa.kernel, pa.kernel_table, pa.cubins))
    assert any(c.what == "flashinfer-backend" for c in g.changes), "H100 and B200 differ in backends: the test needs it"
    pages = [(c.before, c.after) for c in g.changes if c.what == "page-size"]
    assert pages == ([] if ab.plan.kv_cache.page_size == aa.plan.kv_cache.page_size
                     else [(ab.plan.kv_cache.page_size, aa.plan.kv_cache.page_size)])
    # no range differs (one side): a change's rules are those one answer involves and the other does not
    ib, ia = involved(ab), involved(aa)
    for c in g.changes:
        assert all((r.id in ib) != (r.id in ia) for r in c.rules)


# -- FlashInfer releases (real: the kernel rules carry flashinfer ranges) ----------------------------------------
def test_flashinfer_upgrade_matches_plans_on_each_release():
    rs = default_ruleset()
    a, b = parse_sides("flashinfer==0.6.7", "flashinfer==0.7.2.post1", rs)
    rep = upgrade(rs, a, b, {"llama": model_planner(LLAMA, rs)}, [Target("GB300", simulated_node("GB300"))])
    before = plan_model(LLAMA, simulated_node("GB300", flashinfer_version="0.6.7")).attention_groups[0].answer
    after = plan_model(LLAMA, simulated_node("GB300", flashinfer_version="0.7.2.post1")).attention_groups[0].answer
    d, = rep.deployments
    g, = d.groups
    changed = {r.id for r in rules_changed(rs, a, b)}
    causes = changed & (set(involved(before)) | set(involved(after)))
    assert causes, "a rule of differing range must decide this deployment, or the test proves nothing"
    for ph in ("prefill", "decode"):
        x, y = getattr(before.plan, ph).backend, getattr(after.plan, ph).backend
        got = [c for c in g.changes if c.what == "flashinfer-backend" and c.phase == ph]
        assert [(c.before, c.after) for c in got] == ([] if x == y else [(x, y)])
        for c in got:
            assert causes <= {r.id for r in c.rules}
    assert d.worse == worse(outcome(before), outcome(after))


# -- the CLI ---------------------------------------------------------------------------------------
def run(capsys, *argv):
    try:
        rc = cli_main(list(argv))
    except SystemExit as exc:  # argparse's own refusals (a required flag missing)
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_shape_and_exit_follow_the_report(capsys, variant):
    rs, old, new, d = variant
    rc, out, err = run(capsys, "upgrade", "--from", f"vllm=={old}", "--to", f"vllm=={new}", GEMMA,
                       "--device", "B200,H100", "--rules", str(d), "--json")
    data = json.loads(out)
    assert {"schema_version", "from", "to", "engine", "severity", "rules_changed", "deployments", "worse",
            "rules_revision"} <= set(data)
    assert (data["from"], data["to"], data["rules_revision"]) == (f"vllm=={old}", f"vllm=={new}", rs.revision)
    assert [x["device"] for x in data["deployments"]] == ["B200", "H100"]
    for x in data["deployments"]:
        assert {"deployment", "device", "capability", "before", "after", "worse", "changes", "groups", "changed"} <= set(x)
        node = simulated_node(x["device"])
        ob = outcome(plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={old}"))
        oa = outcome(plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={new}"))
        assert (x["before"]["outcome"], x["after"]["outcome"], x["worse"]) == (ob, oa, worse(ob, oa))
    assert rc == (1 if any(x["worse"] for x in data["deployments"]) else 0) == (1 if data["worse"] else 0)
    # the table says the same
    rc2, table, _ = run(capsys, "upgrade", "--from", f"vllm=={old}", "--to", f"vllm=={new}", GEMMA,
                        "--device", "B200,H100", "--rules", str(d))
    assert rc2 == rc and NARROWED in table and ("WORSE" in table) == data["worse"]


def test_cli_sglang_line_worse_is_exit_1(capsys):
    from attnplan.lines import plan_launch
    from attnplan.sglang.launch import parse_launch_line

    line = ["python", "-m", "sglang.launch_server", "--model-path", "llama-3.1-8b"]
    want = [plan_launch(parse_launch_line(line), simulated_node("GB300", flashinfer_version=v)).verdict.outcome
            for v in ("0.7.2.post1", "0.6.7")]
    assert want[0] != want[1], "flashinfer 0.6.7's SM103 hang must change SGLang's trtllm_mha here"
    rc, out, _ = run(capsys, "upgrade", "--from", "flashinfer==0.7.2.post1", "--to", "flashinfer==0.6.7",
                     "--device", "GB300", "--", *line, "--json")
    d, = json.loads(out)["deployments"]
    assert [d["before"]["outcome"], d["after"]["outcome"]] == want
    assert rc == int(worse(*want)) and d["worse"] == worse(*want)
    rc_back, out, _ = run(capsys, "upgrade", "--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1",
                          "--device", "GB300", "--", *line, "--json")
    assert rc_back == int(worse(want[1], want[0])) and rc_back != rc


def test_cli_serve_line_matches_attnplan_vllm_serve(capsys):
    from attnplan.vllm.args import parse_serve_line
    from attnplan.request import plan_serve

    words = ["llama-3.1-8b", "-tp", "2"]
    want = [plan_serve(parse_serve_line(words), simulated_node("GB300", flashinfer_version=v)).verdict
            for v in ("0.6.7", "0.7.2.post1")]
    rc, out, _ = run(capsys, "upgrade", "--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1",
                     "--device", "GB300", "--", "vllm", "serve", *words, "--json")
    d, = json.loads(out)["deployments"]
    assert d["deployment"] == "vllm serve " + " ".join(words)
    for side, v in zip(("before", "after"), want):
        assert (d[side]["outcome"], d[side]["selected"]["decode"]) == (v.outcome, v.selected.decode)
    assert rc == int(worse(want[0].outcome, want[1].outcome))


@pytest.mark.parametrize("argv", [
    ["--from", "vllm==0.33.0", "--to", "vllm==0.33.0", "llama-3.1-8b", "--device", "H100"],
    ["--from", "vllm==0.1.0", "--to", "vllm==0.33.0", "llama-3.1-8b", "--device", "H100"],
    ["--from", "vllm==0.33.0", "--to", "sglang==0.5.23", "llama-3.1-8b", "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "vllm==0.33.0", "llama-3.1-8b", "--device", "H100"],
    ["--from", "vllm", "--to", "vllm==0.33.0", "llama-3.1-8b", "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==nope", "llama-3.1-8b", "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "llama-3.1-8b", "--device", "H999"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "llama-3.1-8b", "--device", ""],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "a", "b", "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "no-such-model-anywhere", "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "--engine", "flashinfer", "llama-3.1-8b",
     "--device", "H100"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "llama-3.1-8b", "--flashinfer-version", "0.6.7"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "llama-3.1-8b", "--device", "H100", "--tp", "0"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "llama-3.1-8b", "--device", "H100", "--tp", "3"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "--device", "H100", "--tp", "2", "--",
     "vllm", "serve", "llama-3.1-8b"],
    ["--from", "vllm==0.33.0", "--to", "vllm==0.33.1", "--device", "H100", "--",
     "python", "-m", "sglang.launch_server", "--model-path", "llama-3.1-8b"],
    ["--from", "flashinfer==0.6.7", "--to", "flashinfer==0.7.2.post1", "--device", "H100", "--",
     "vllm", "serve", "llama-3.1-8b", "--no-such-flag"],
    ["--to", "vllm==0.33.0", "llama-3.1-8b"],
])
def test_cli_bad_input_is_exit_2_in_one_line(capsys, argv):
    rc, out, err = run(capsys, "upgrade", *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("attnplan") and "Traceback" not in err


def test_cli_unmodelled_release_error_names_the_modelled(capsys):
    rs = default_ruleset()
    rc, _, err = run(capsys, "upgrade", "--from", "vllm==0.1.0", "--to", f"vllm=={rs.engines['vllm'].versions[-1]}",
                     "llama-3.1-8b", "--device", "H100")
    assert rc == 2 and all(name in err for name in engine_names(rs))


# -- --preflight: each node service's own facts ---------------------------------------------------------
def test_preflight_plans_each_nodes_own_facts(capsys, variant, tmp_path):
    from attnplan.rest.app import create_app
    from attnplan.rest.server import BackgroundServer

    rs, old, new, d = variant
    nodes = {"b200": simulated_node("B200"), "h100": simulated_node("H100")}
    servers = {k: BackgroundServer(create_app(node=n)) for k, n in nodes.items()}
    for s in servers.values():
        s.__enter__()
    try:
        hosts = tmp_path / "hosts.txt"
        hosts.write_text("".join(f"127.0.0.1:{s.port}  # {k}\n" for k, s in servers.items()))
        rc, out, _ = run(capsys, "upgrade", "--from", f"vllm=={old}", "--to", f"vllm=={new}", GEMMA,
                         "--preflight", str(hosts), "--rules", str(d), "--json")
        data = json.loads(out)
        assert [x["device"] for x in data["deployments"]] == [f"127.0.0.1:{s.port}" for s in servers.values()]
        for x, node in zip(data["deployments"], nodes.values()):
            ob = outcome(plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={old}"))
            oa = outcome(plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={new}"))
            assert (x["capability"], x["before"]["outcome"], x["after"]["outcome"]) == (node.capability_str, ob, oa)
        assert rc == int(data["worse"])
        port = next(iter(servers.values())).port
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)
    # the same hosts, gone: exit 3, one line
    rc, out, err = run(capsys, "upgrade", "--from", f"vllm=={old}", "--to", f"vllm=={new}", GEMMA,
                       "--preflight", str(hosts), "--rules", str(d))
    assert rc == 3 and out == "" and len(err.strip().splitlines()) == 1 and f"127.0.0.1:{port}" in err


# -- preflight's upgrade column ------------------------------------------------------------------------
def test_preflight_upgrade_column_is_the_upgrade_of_each_nodes_answer(capsys, variant):
    rs, old, new, d = variant
    argv = ["preflight", "--simulate", "B200=1,H100=1", "--model", "gemma-2-9b", "--engine", f"vllm=={old}",
            "--rules", str(d), "--upgrade-to", f"vllm=={new}"]
    rc, out, _ = run(capsys, *argv, "--json")
    report = json.loads(out)
    seen = set()
    for row in report["nodes"]:
        node = simulated_node(row["device"])
        before = plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={old}")
        after = plan_model(GEMMA, node, ruleset=rs, engine=f"vllm=={new}")
        u = row["results"][0]["upgrade"]
        assert (u["to"], u["before"], u["after"]) == (f"vllm=={new}", outcome(before), outcome(after))
        assert u["worse"] == worse(outcome(before), outcome(after))
        assert (NARROWED in u["rules"]) == (outcome(before) != outcome(after))
        seen.add(u["worse"])
    assert seen == {True, False}, "one node must get worse and one not, or the column proves little"
    rc2, text, _ = run(capsys, *argv)
    assert rc2 == rc and f"upgrade to vllm=={new}" in text and "WORSE" in text


@pytest.mark.parametrize("to", ["vllm==0.1.0", "vllm", "flashinfer==nope"])
def test_preflight_upgrade_to_an_unmodelled_release_is_exit_2(capsys, to):
    rc, out, err = run(capsys, "preflight", "--simulate", "B200=1", "--model", "llama-3.1-8b", "--upgrade-to", to)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_preflight_upgrade_to_another_engine_is_an_error_cell(capsys):
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=1", "--model", "llama-3.1-8b", "--upgrade-to",
                     "sglang==0.5.23", "--json")
    u = json.loads(out)["nodes"][0]["results"][0]["upgrade"]
    assert u["error"] and "sglang" in u["error"] and u["after"] is None

"""verify end to end on the CPU: the float32 reference stands in for FlashInfer (injected runner).

A test pack makes one rule stale (it refuses head sizes the stand-in runs correctly) and one
dangerous (it accepts a page size the stand-in computes wrong); the report must say so.
"""

from __future__ import annotations

import argparse
import json
import sys

import pytest

torch = pytest.importorskip("torch")

from attnplan.policy import load_rules as _load_rules, simulated_node  # noqa: E402
from attnplan.verify import build_report, exit_code, generate, markdown, provenance, run_probes, write_report  # noqa: E402
from attnplan.verify import calls  # noqa: E402
from attnplan.verify.child import compare  # noqa: E402
from attnplan.verify.report import probe_verdict  # noqa: E402
from attnplan.verify.runner import subprocess_runner  # noqa: E402


def load_rules(d):
    """The test's pack with the engine packs the whole-set check wants beside it (tests/verify_packs.py)."""
    from pathlib import Path

    from verify_packs import with_engine_packs

    return _load_rules(with_engine_packs(Path(d)))

PACK = """\
pack: t
rules:
  - id: t.stale-head
    title: head sizes
    reason: test
    source: test
    backends: [fa2]
    when: {fact: config.is_mla, eq: false}
    require: {fact: config.head_dim, in: [64, 128]}
  - id: t.dangerous-page
    title: pages
    reason: test
    source: test
    backends: [fa2]
    phases: [decode]
    when: {fact: config.is_mla, eq: false}
    require: {fact: config.page_size, in: [16, 32]}
  - id: t.query
    title: query dtype
    reason: test
    source: test
    backends: [fa2]
    phases: [decode]
    require: {fact: config.dtype, in: [fp16, bf16]}
"""


def standin(probe, timeout):
    """The reference as 'FlashInfer': runs head sizes 64..256 and 16-bit queries, computes page
    32 wrong (adds 1), refuses everything else - through the real inputs, reference and compare."""
    spec = probe.spec
    if spec["query_dtype"] not in ("bfloat16", "float16") or spec["head_dim_qk"] not in (64, 96, 128, 256):
        return {"outcome": "error", "error": "RuntimeError: stand-in has no kernel for this"}
    torch.manual_seed(spec["seed"])
    inp = calls.make_inputs(spec, torch, "cpu")
    out = calls.reference(spec, inp).to(inp.out.dtype).float()
    if spec["page_size"] == 32:
        out = out + 1.0
    return compare(out, calls.reference(spec, inp), spec["tolerance"])


@pytest.fixture()
def report(tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    rs = load_rules(tmp_path)
    gen = generate(rs, simulated_node("H100"))
    gen.probes = [p for p in gen.probes if p.backend == "fa2" and not p.config.get("kv_lora_rank")]
    results = run_probes(gen.probes, standin, jobs=2)
    return build_report(gen, results, device="H100", capability="9.0", flashinfer="0.7.2.post1", date="2026-11-22")


def test_stale_dangerous_and_consistent_rules_are_reported(report):
    verdicts = {r["id"]: r["verdict"] for r in report["rules"]}
    assert verdicts == {"t.stale-head": "stale", "t.dangerous-page": "dangerous", "t.query": "consistent"}
    assert exit_code(report) == 1
    stale = [p for p in report["probes"] if p["verdicts"].get("t.stale-head") == "stale"]
    assert stale and all(p["outcome"] == "ok" and p["rel_err"] <= 1e-2 for p in stale)
    assert {p["config"]["head_dim"] for p in stale} >= {96, 256}
    bad = [p for p in report["probes"] if p["verdicts"].get("t.dangerous-page") == "dangerous"]
    assert bad and all(p["config"]["page_size"] == 32 and p["outcome"] == "wrong" for p in bad)


def test_report_files_and_provenance(report, tmp_path):
    js = write_report(report, str(tmp_path / "docs" / "H100-flashinfer-0.7.2.post1.md"))
    data = json.loads(open(js).read())
    md = (tmp_path / "docs" / "H100-flashinfer-0.7.2.post1.md").read_text()
    assert "`t.dangerous-page`: dangerous" in md and "| rule | verdict |" in md
    assert markdown(data) == md
    # the fixture's report has no torch (an --offline rebuild): said so, not printed as None
    assert "torch version not recorded" in md and "torch None" not in md
    assert "; torch 2.11.0+cu130)" in markdown({**data, "torch": "2.11.0+cu130"})
    records = dict(provenance(data))
    assert records["t.stale-head"] == {"device": "H100", "capability": "9.0", "flashinfer": "0.7.2.post1",
                                       "date": "2026-11-22", "verdict": "stale"}


def test_no_dangerous_rule_exits_zero(tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    rs = load_rules(tmp_path)
    gen = generate(rs, simulated_node("H100"), only=["t.query"], quick=True)
    results = run_probes(gen.probes, standin, jobs=1)
    rep = build_report(gen, results, device="H100", capability="9.0", flashinfer="x")
    assert [r["verdict"] for r in rep["rules"]] == ["consistent"] and exit_code(rep) == 0


def test_probe_verdict_table():
    assert probe_verdict("accept", "ok") == "consistent"
    assert probe_verdict("accept", "wrong") == "dangerous"
    assert probe_verdict("refuse", "ok") == "stale"
    assert probe_verdict("refuse", "error") == "consistent"
    assert probe_verdict("accept", "hang") == "hang"


def test_a_probe_that_hangs_is_killed_and_reported_as_hang(tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    # Page sizes share a JIT module, so the rule's probes run after their module's first probe.
    gen = generate(load_rules(tmp_path), simulated_node("H100"), only=["t.dangerous-page"])
    hanging = subprocess_runner([sys.executable, "-c", "import time; time.sleep(60)"])
    built: set[str] = set()

    def runner(p, timeout):  # each module's first probe (its build) answers correctly; the others hang
        if p.module not in built:
            built.add(p.module)
            return {"outcome": "ok", "rel_err": 0.0, "tolerance": 1e-2, "error": None}
        return hanging(p, timeout)

    results = run_probes(gen.probes, runner, jobs=4, build_timeout=30.0, probe_timeout=1.0)
    hung = [r for r in results.values() if r["outcome"] == "hang"]
    assert hung and all(r["seconds"] < 30 for r in hung)
    accept_hung = [p for p in gen.probes
                   if results[p.id]["outcome"] == "hang" and any(b.side == "accept" for b in p.boundaries)]
    assert accept_hung, "the test pack gives an accepting probe that runs after its module's build"
    rep = build_report(gen, results, device="H100", capability="9.0", flashinfer="x")
    assert rep["rules"][0]["verdict"] == "hang" and exit_code(rep) == 1


def test_a_build_probe_over_its_limit_is_a_build_timeout_not_a_hang(tmp_path):
    # The first probe of a module compiles it and runs it under one limit: running out of it says
    # the build was slow (fa3 modules take minutes on the H100), so the rule is untested, not hung.
    (tmp_path / "t.yaml").write_text(PACK)
    gen = generate(load_rules(tmp_path), simulated_node("H100"), only=["t.query"], quick=True)
    runner = subprocess_runner([sys.executable, "-c", "import time; time.sleep(60)"])
    results = run_probes(gen.probes, runner, jobs=4, build_timeout=1.0, probe_timeout=1.0)
    assert {r["outcome"] for r in results.values()} == {"build-timeout"}
    assert all(r["seconds"] < 30 for r in results.values())
    rep = build_report(gen, results, device="H100", capability="9.0", flashinfer="x")
    assert rep["rules"][0]["verdict"] not in ("hang", "dangerous") and exit_code(rep) == 0


def test_a_probe_process_that_dies_is_an_error(tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    gen = generate(load_rules(tmp_path), simulated_node("H100"), only=["t.query"], quick=True)
    runner = subprocess_runner([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])
    results = run_probes(gen.probes[:1], runner)
    (res,) = results.values()
    assert res["outcome"] == "error" and "exited 3" in res["error"] and "boom" in res["error"]


def test_deadline_skips_probes_not_started(tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    gen = generate(load_rules(tmp_path), simulated_node("H100"))
    results = run_probes(gen.probes, standin, deadline=-1.0)
    assert {r["outcome"] for r in results.values()} == {"skipped"}


def _cli(argv):
    from attnplan.cli import verify

    parser = argparse.ArgumentParser()
    verify.add_parser(parser.add_subparsers())
    args = parser.parse_args(["verify", *argv])
    return args.run(args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_cli_without_a_gpu_exits_2_with_one_line(capsys):
    assert _cli(["--quick"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "GPU" in err


def test_cli_list_runs_without_a_gpu(capsys, tmp_path):
    (tmp_path / "t.yaml").write_text(PACK)
    load_rules(tmp_path)                  # the engine packs beside it: --rules loads the set whole
    assert _cli(["--list", "--device", "H100", "--rules", str(tmp_path), "--rule", "t.query"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines and {tuple(x["refused_by"]) for x in lines} == {(), ("t.query",)}


def test_cli_run_writes_jsonl_report_and_exits_1_on_a_dangerous_rule(tmp_path, monkeypatch, capsys):
    # The whole command on the CPU: the GPU and its node are declared, the probes run on the stand-in.
    import attnplan.cli.verify as cli
    import attnplan.node as node_pkg
    import attnplan.verify as verify

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "t.yaml").write_text(PACK)
    load_rules(rules)                     # the engine packs beside it: --rules loads the set whole
    monkeypatch.setattr(cli, "_gpu", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(node_pkg, "local_node", lambda: simulated_node("H100"))
    monkeypatch.setattr(verify, "subprocess_runner", lambda **kw: standin)
    md = tmp_path / "docs" / "H100-flashinfer-x.md"
    code = _cli(["--rules", str(rules), "--rule", "t.dangerous-page", "--out", str(tmp_path / "out"),
                 "--report", str(md), "--jobs", "2"])
    assert code == 1
    out, err = capsys.readouterr()
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines and all("outcome" in x and "verdicts" in x for x in lines)
    assert (tmp_path / "out" / "probes.jsonl").read_text().splitlines() == out.splitlines()
    data = json.loads(md.with_suffix(".json").read_text())
    assert data["device"] == "H100" and data["capability"] == "9.0"
    assert [r["verdict"] for r in data["rules"]] == ["dangerous"]
    assert "| `t.dangerous-page` | dangerous |" in err


def test_cli_provenance_prints_each_rules_record(report, tmp_path, capsys):
    js = write_report(report, str(tmp_path / "r.md"))
    assert _cli(["--provenance", js]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {x["rule"]: x["verified"]["verdict"] for x in lines} == {
        "t.stale-head": "stale", "t.dangerous-page": "dangerous", "t.query": "consistent"}
    (tmp_path / "bad.json").write_text('{"rules": 3}')
    from attnplan.policy import InvalidInputError

    with pytest.raises(InvalidInputError):
        _cli(["--provenance", str(tmp_path / "bad.json")])


def test_cli_sweep_says_it_is_generating_before_the_long_silence(capsys):
    # Generating the sweep takes up to ~25 s of CPU before the first probe line (the H100 lease of
    # bench/logs/h100-2026-11-25e waited 57 s from start to it): a line on stderr says so first,
    # and stdout stays pure JSON lines for `--list | jq`.
    assert _cli(["--sweep", "--list", "--device", "H100", "--target", "fa2/prefill"]) == 0
    out, err = capsys.readouterr()
    probes = [json.loads(x) for x in out.splitlines()]
    assert probes and {p["backend"] for p in probes} == {"fa2"}
    lines = err.strip().splitlines()
    # The first line comes before the rules load (issue 40 class 9: tests/test_verify_strength_sample.py).
    assert "generating the covering sweep (seed 0" in lines[0]
    assert any("generating the covering sweep (seed 0, strength 3)" in x and "capability 9.0" in x for x in lines)

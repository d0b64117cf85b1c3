"""Preflight without a network: --simulate, the report (verdicts, groups, heterogeneity, exit
codes, JSON shape, text), --configs files and bad input (exit 2, one line)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from attnplan.cli.main import main as cli_main
from attnplan.policy import PlanAnswer, default_ruleset, make_config, plan_for, simulated_node
from attnplan.preflight.configs import load_configs
from attnplan.preflight.model import NamedConfig, Outcome, PreflightReport
from attnplan.preflight.report import build_report, compact_names, render_text
from attnplan.preflight.simulate import parse_spec, simulate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]
LLAMA_CFG = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def named(**fields) -> list[NamedConfig]:
    return [NamedConfig("c", make_config({**LLAMA_CFG, **fields}))]


# -- simulate --------------------------------------------------------------------------------
def test_parse_spec():
    assert parse_spec("B200=8, GB300=4,H100") == [("B200", 8), ("GB300", 4), ("H100", 1)]
    assert parse_spec("RTX PRO 6000=2") == [("RTX PRO 6000", 2)]
    for bad in ("", "B200=x", "B200=0", "=3", ",,"):
        with pytest.raises(Exception) as e:
            parse_spec(bad)
        assert "simulate" in str(e.value)


def test_simulate_plans_each_device_once_and_names_nodes():
    out = simulate("B200=3,H100=2,b200=1", named())
    assert [o.name for o in out] == ["b200-0", "b200-1", "b200-2", "h100-0", "h100-1", "b200-3"]
    assert out[0].answers[0] is out[2].answers[0]  # shared facts: planned once per entry
    assert out[0].answers[0].plan.prefill.backend == "trtllm-gen"
    assert out[3].answers[0].plan.prefill.backend == "fa3"


def test_simulate_cli_text_report(capsys):
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=8,GB300=4,H100=16",
                     "--model-config", str(EXAMPLES / "qwen3-32b.json"))
    assert rc == 0
    lines = out.strip().splitlines()
    # what runs: vLLM's own FLASH_ATTN on the H100s, FlashInfer's trtllm-gen on the Blackwells
    assert lines[-1].startswith("28 nodes: 28 ok, 0 rejected, 0 unreachable; heterogeneous: prefill FLASH_ATTN on 16 "
                                "nodes vs trtllm-gen on 12")
    assert "h100-[0-15]" in out and "b200-[0-7]" in out and "gb300-[0-3]" in out
    assert "would mix kernels" in out
    assert "qwen3-32b" in lines[1]
    # grouped: three groups, not 28 rows
    assert len([ln for ln in lines if re.match(r"^\d+\s+\d+\s+", ln)]) == 3


def test_simulate_rejection_exit_1_and_details(capsys):
    # NVFP4 KV at head_dim 64: trtllm-gen reads it on the B200; vLLM 0.33 refuses fa2 there on
    # 12.x (_nvfp4_kv_on_fa2) and fa2 misreads it (the kernel layer), so the RTX PRO 6000s reject.
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=2,RTX PRO 6000=3", *LLAMA, "--head-dim", "64",
                     "--kv-cache-dtype", "nvfp4")
    assert rc == 1
    # vLLM finds no backend of its own for it there (FlashInfer's refusal is vllm.nvfp4): it refuses at startup
    assert "FAILS-AT-STARTUP" in out and "vllm.nvfp4" in out and "No valid attention backend found" in out
    assert "rejects config" in out and "suggestions: kv_cache_dtype=" in out
    assert out.strip().splitlines()[-1].startswith("5 nodes: 2 ok, 3 rejected, 0 unreachable")


def test_simulate_declared_software_facts(capsys):
    # GB300 on flashinfer 0.6.7 (trtllm.sm103-hang): planned on fa2, with the note
    rc, out, _ = run(capsys, "preflight", "--simulate", "GB300=2", *LLAMA, "--flashinfer-version", "0.6.7", "--json")
    data = json.loads(out)
    assert rc == 0 and data["nodes"][0]["results"][0]["prefill"] == "fa2"
    assert any("trtllm.sm103-hang" in n for n in data["groups"][0]["results"][0]["notes"])
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=2,GB300=2", *LLAMA, "--flashinfer-version", "0.6.7")
    assert rc == 0 and "group 2 (2 x GB300) falls back on config:" in out and "[trtllm.sm103-hang]" in out
    assert "prefill trtllm-gen on 2 nodes vs fa2 on 2" in out
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=1", *LLAMA, "--attention-backend", "trtllm-gen",
                     "--cubins", "missing", "--json")
    assert rc == 1 and "trtllm.cubins" in json.loads(out)["nodes"][0]["results"][0]["violations"]


def test_json_contract_shape(capsys):
    rc, out, _ = run(capsys, "preflight", "--simulate", "B200=2,H100=1", *LLAMA, "--json")
    data = json.loads(out)
    assert list(data) == ["schema_version", "rules_revision", "query", "summary", "nodes", "groups", "warnings",
                          "generated_at"]
    assert data["schema_version"] == "1" and data["rules_revision"] == default_ruleset().revision
    assert data["query"] == {"source": "simulate", "targets": ["B200=2,H100=1"], "options": {},
                             "configs": [{"name": "config", "config": make_config(LLAMA_CFG).model_dump(mode="json"),
                                          "engine": None, "request": None,
                                          "description": "head_dim=128 num_qo_heads=32 num_kv_heads=8"}]}
    PreflightReport.model_validate(data)  # round-trips through its own schema
    for n in data["nodes"]:
        assert n["verdict"] in ("pass", "fail", "warn", "error", "skip")
        assert re.fullmatch(r"[0-9a-f]{16}", n["fingerprint"])
        assert {"config", "verdict", "prefill", "decode", "kv_layout", "page_size", "violations"} <= set(n["results"][0])
    assert sum(g["count"] for g in data["groups"]) == len(data["nodes"]) == 3
    assert data["summary"]["exit_code"] == rc == 0


# -- the engine layer ------------------------------------------------------------------------
def test_engine_flag_plans_the_simulated_nodes_and_is_reported(capsys):
    rc, out, _ = run(capsys, "preflight", "--simulate", "H100=2", *LLAMA, "--attention-backend", "FLASHINFER", "--json")
    default = json.loads(out)
    rc2, out2, _ = run(capsys, "preflight", "--simulate", "H100=2", *LLAMA, "--engine", "flashinfer", "--json")
    kernel = json.loads(out2)
    assert rc == rc2 == 0
    # vLLM 0.33's FLASHINFER decodes with XQA on 9.0; the kernel layer's own order picks fa2 decode
    assert default["nodes"][0]["results"][0]["decode"] == "xqa" and kernel["nodes"][0]["results"][0]["decode"] == "fa2"
    assert default["query"]["configs"][0]["engine"] is None and kernel["query"]["configs"][0]["engine"] == "flashinfer"
    expected = plan_for(LLAMA_CFG, simulated_node("H100"), engine="flashinfer").plan.decode.backend
    assert kernel["nodes"][1]["results"][0]["decode"] == expected
    rc, out, _ = run(capsys, "preflight", "--simulate", "H100=2", *LLAMA, "--engine", "flashinfer")
    assert rc == 0 and "(engine flashinfer)" in out.splitlines()[1]
    # without --attention-backend vLLM runs its own FLASH_ATTN on the H100: the cell says so
    rc, out, _ = run(capsys, "preflight", "--simulate", "H100=2", *LLAMA, "--json")
    cell = json.loads(out)["nodes"][0]["results"][0]
    assert rc == 0 and (cell["outcome"], cell["modelled"], cell["decode"]) == ("runs", False, "FLASH_ATTN")


def test_engine_per_config_in_yaml_wins_over_the_flag(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("- {name: kernel, head_dim: 128, num_qo_heads: 32, num_kv_heads: 8, engine: flashinfer}\n"
                 "- {name: plain, head_dim: 128, num_qo_heads: 32, num_kv_heads: 8}\n")
    assert [c.engine for c in load_configs(f)] == ["flashinfer", None]
    assert [c.engine for c in load_configs(f, engine="vllm==0.33.0")] == ["flashinfer", "vllm==0.33.0"]
    out = simulate("H100=1", load_configs(f))
    assert [a.engine.name for a in out[0].answers] == ["flashinfer", "vllm"]
    assert [a.plan.decode.backend for a in out[0].answers] == ["fa2", "xqa"]


@pytest.mark.parametrize("argv, field", [
    (["--engine", "sglang==0.4.0"], "engine"),
    (["--engine", "vllm==0.1.0"], "engine"),
])
def test_uncovered_engine_is_exit_2_one_line(capsys, argv, field):
    rc, out, err = run(capsys, "preflight", "--simulate", "H100=1", *LLAMA, *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"{field}:" in err and "vllm==0.33.0" in err and "flashinfer" in err


def test_uncovered_engine_in_yaml_is_exit_2_naming_the_entry(capsys, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("- {name: odd, head_dim: 128, num_qo_heads: 32, num_kv_heads: 8, engine: sglang==0.4.0}\n")
    rc, out, err = run(capsys, "preflight", "--simulate", "H100=1", "--configs", str(f))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "odd" in err and "engine" in err
    f.write_text("- {name: odd, head_dim: 128, num_qo_heads: 32, num_kv_heads: 8, engine: 3}\n")
    rc, out, err = run(capsys, "preflight", "--simulate", "H100=1", "--configs", str(f))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "entry 1 (odd): engine" in err


# -- report semantics -------------------------------------------------------------------------
def _answer(device: str, **fields) -> PlanAnswer:
    # vLLM's FlashInfer backend (FLASHINFER): the FlashInfer kernels are the cells' subject here
    return plan_for({**LLAMA_CFG, "attention_backend": "FLASHINFER", **fields}, simulated_node(device))


def test_unprobed_node_is_never_pass():
    from attnplan.policy import Fact, NodeFacts

    no_gpu = NodeFacts(gpu_count=Fact.measured(0, "NVML"), capability=Fact.unknown("no GPU"))
    outs = [Outcome(name="gpu", answers=[_answer("B200")]),
            Outcome(name="cpu", answers=[plan_for(LLAMA_CFG, no_gpu)]),
            Outcome(name="gone", kind="unreachable", reason="connection refused"),
            Outcome(name="junk", kind="error", reason="malformed JSON: x")]
    r = build_report(source="hosts", targets=[], configs=named(), outcomes=outs)
    by = {n.name: n for n in r.nodes}
    assert by["gpu"].verdict == "pass"
    assert by["cpu"].status == "no-gpu" and by["cpu"].verdict == "skip" and by["cpu"].reason == "no GPU on this node"
    assert by["gone"].verdict == "error" and by["junk"].verdict == "error"
    assert all(n.results[0].verdict != "pass" for n in r.nodes if n.name != "gpu")
    assert r.summary.exit_code == 3


def test_exit_codes():
    def code(*outs: Outcome) -> int:
        return build_report(source="hosts", targets=[], configs=named(), outcomes=list(outs)).summary.exit_code

    ok = Outcome(name="a", answers=[_answer("B200")])
    rej = Outcome(name="b", answers=[_answer("H100", attention_backend="trtllm-gen")])
    gone = Outcome(name="c", kind="unreachable", reason="x")
    assert code(ok) == 0
    assert code(ok, rej) == 1
    assert code(ok, rej, gone) == 3
    assert code(ok, gone) == 3
    from attnplan.policy import Fact, NodeFacts

    cpu = Outcome(name="d", answers=[plan_for(LLAMA_CFG, NodeFacts(gpu_count=Fact.measured(0)))])
    assert code(ok, cpu) == 0  # a GPU-less head node does not fail the cluster...
    assert code(cpu) == 1  # ...but a cluster where nothing can run it is not ok


def test_heterogeneity_warns_minority_and_names_fields():
    outs = [Outcome(name=f"b{i}", answers=[_answer("B200")]) for i in range(3)]
    outs.append(Outcome(name="h0", answers=[_answer("H100")]))
    r = build_report(source="hosts", targets=[], configs=named(), outcomes=outs)
    assert r.summary.heterogeneous
    assert [n.verdict for n in r.nodes] == ["pass", "pass", "pass", "warn"]
    assert "unlike 3 of 4 nodes" in r.nodes[3].results[0].reason
    w = {w.field: w for w in r.warnings if w.kind == "heterogeneous"}
    assert set(w) == {"prefill", "decode", "kv_layout"}
    assert w["prefill"].values == {"trtllm-gen": 3, "fa3": 1}
    assert "prefill trtllm-gen on 3 nodes vs fa3 on 1" in r.summary.line
    # a homogeneous cluster says so and warns nothing
    same = build_report(source="hosts", targets=[], configs=named(), outcomes=outs[:3])
    assert not same.summary.heterogeneous and not same.warnings and same.summary.line.endswith("; homogeneous")


def test_page_size_disagreement_is_heterogeneous():
    # MLA on B200 needs page 32 (trtllm-gen-mla), on H100 the native MLA takes 16: a shared pool would differ
    mla = {"num_qo_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    cfg = [NamedConfig("mla", make_config(mla))]
    # the kernel layer: vLLM 0.33 has no FlashInfer MLA on 9.0 (vllm.mla-backend, issue 21)
    outs = [Outcome(name="b", answers=[plan_for(mla, simulated_node("B200"), engine="flashinfer")]),
            Outcome(name="h", answers=[plan_for(mla, simulated_node("H100"), engine="flashinfer")])]
    r = build_report(source="hosts", targets=[], configs=cfg, outcomes=outs)
    assert [n.results[0].page_size for n in r.nodes] == [32, 16]
    w = {w.field: w.values for w in r.warnings if w.kind == "heterogeneous"}
    assert w["page_size"] == {"32": 1, "16": 1} and w["decode"] == {"trtllm-gen-mla": 1, "fa3-mla": 1}


def test_rules_revision_skew_is_warned():
    a = _answer("B200")
    other = a.model_copy(update={"rules_revision": "000000000000"})
    r = build_report(source="hosts", targets=[], configs=named(),
                     outcomes=[Outcome(name="x", answers=[a]), Outcome(name="y", answers=[other])])
    assert any(w.kind == "rules-revision" and "000000000000" in w.message for w in r.warnings)
    assert r.nodes[0].group != r.nodes[1].group


def test_groups_collapse_thousands_of_nodes_quickly():
    t0 = time.perf_counter()
    outs = simulate("B200=600,GB300=200,H100=200", named())
    r = build_report(source="simulate", targets=[], configs=named(), outcomes=outs)
    text = render_text(r)
    assert time.perf_counter() - t0 < 5
    assert len(r.groups) == 3 and r.summary.nodes == 1000
    assert len(text.splitlines()) < 25 and "b200-[0-599]" in text


def test_compact_names():
    assert compact_names(["n1", "n2", "n3", "n5", "x"]) == "n[1-3,5], x"
    assert compact_names(["10.0.0.1:8000", "10.0.0.2:8000"]) == "10.0.0.[1-2]:8000"
    assert compact_names(["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9004"]) == "127.0.0.1:[9001-9002,9004]"
    assert compact_names(["gpu007", "gpu008"]) == "gpu[007-008]"
    many = compact_names([f"127.0.0.1:{p}" for p in range(30000, 31000, 3)], max_chars=40)
    assert many.startswith("127.0.0.1:[30000,30003,") and many.endswith("]") and len(many) <= 50
    shown = many[many.index("[") + 1:many.index(",...")].split(",")
    assert many.endswith(f",...+{334 - len(shown)}]")  # every name accounted for
    long = compact_names([f"host-{c}" for c in "abcdefghijklmnopqrstuvwxyz"], max_chars=30)
    assert long.endswith("more)") and len(long) < 50


# -- configs and bad input -------------------------------------------------------------------
def test_configs_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(f"""
- name: llama
  model_config: {EXAMPLES / 'llama-3.1-8b.json'}
  kv_cache_dtype: fp8
- model_config: ../{tmp_path.name}/gemma.json
- {{head_dim: 128, num_qo_heads: 32, num_kv_heads: 8}}
- {{name: llama, head_dim: 64, num_qo_heads: 8}}
""")
    (tmp_path / "gemma.json").write_text((EXAMPLES / "gemma-2-9b.json").read_text())
    cfgs = load_configs(f)
    assert [c.name for c in cfgs] == ["llama", "gemma", "config-3", "llama#2"]
    # model_config entries are whole models (every layer group planned by each node), read here and
    # sent inline; the flat fields become the request's serve fields
    assert cfgs[0].config is None and cfgs[0].request.kv_cache_dtype == "fp8"
    assert cfgs[0].request.model["num_key_value_heads"] == 8
    assert cfgs[1].request.model["attn_logit_softcapping"] == 50.0  # relative model_config path, read from the file
    assert cfgs[2].request is None and cfgs[2].config.num_kv_heads == 8


@pytest.mark.parametrize("text, words", [
    ("- {head_dim: 128, num_qo_heads: 32, bogus: 1}", "entry 1: bogus"),
    ("- {head_dim: 128, num_qo_heads: 32}\n- {name: bad, head_dim: 128, num_qo_heads: 32, kv_cache_dtype: fp5}",
     "entry 2 (bad): kv_cache_dtype"),
    ("- {name: m, model_config: nope.json}", "entry 1 (m): model_config"),
    ("- 3", "entry 1"),
    ("[]", "non-empty"),
    ("- {head_dim: 128, num_qo_heads: [", "not valid YAML"),
])
def test_bad_configs_file_exit_2_one_line(capsys, tmp_path, text, words):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    rc, out, err = run(capsys, "preflight", "--simulate", "B200=1", "--configs", str(f))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert words in err, err


@pytest.mark.parametrize("argv, words", [
    (["--simulate", "B200=1"], "num_qo_heads"),
    (["--simulate", "B2000=1", *LLAMA], "simulate: 'B2000'"),
    (["--simulate", "B200=0", *LLAMA], "at least 1"),
    (["--hosts", "h1:99999", *LLAMA], "hosts"),
    (["--hosts", "ftp://h1:80", *LLAMA], "scheme"),
    (["--hosts", "h1:8000", *LLAMA, "--concurrency", "0"], "concurrency"),
    (["--hosts", "h1:8000", *LLAMA, "--flashinfer-version", "0.6.7"], "--simulate"),
    (["--hosts-file", "/nonexistent/hosts.txt", *LLAMA], "no such file"),
    (["--simulate", "B200=1", "--head-dim", "x", "--num-heads", "8"], "head_dim"),
])
def test_bad_input_exit_2(capsys, argv, words):
    rc, out, err = run(capsys, "preflight", *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err, err


def test_nodes_source_is_required(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["preflight", *LLAMA])
    assert e.value.code == 2
    assert "one of the arguments" in capsys.readouterr().err


def test_hosts_parsing(tmp_path):
    from attnplan.preflight.http import parse_hosts, read_hosts_file

    hs = parse_hosts(["h1:8000, h2", "http://[::1]:9000/", "https://h3", "h1:8000"])
    assert [(h.name, h.url) for h in hs] == [
        ("h1:8000", "http://h1:8000"), ("h2:8000", "http://h2:8000"), ("[::1]:9000", "http://[::1]:9000"),
        ("h3:443", "https://h3:443")]
    f = tmp_path / "hosts.txt"
    f.write_text("# the rack\nn1:8000\n\nn2:8000  # spare\n")
    assert [h.name for h in read_hosts_file(str(f))] == ["n1:8000", "n2:8000"]


def test_ray_unreachable_cluster_is_exit_3_not_a_new_cluster(capsys, monkeypatch):
    ray = pytest.importorskip("ray")
    calls = {}

    def fake_init(*a, **kw):  # never start or join anything here: record and refuse
        calls.update(kw)
        raise ConnectionError("Could not find any running Ray instance")

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    rc, out, err = run(capsys, "preflight", "--ray", *LLAMA)
    assert rc == 3 and "cannot connect to the Ray cluster at 'auto'" in err
    assert calls["address"] == "auto"  # never address=None, which would start a local cluster


def test_html_written_and_self_contained(capsys, tmp_path):
    f = tmp_path / "r.html"
    rc, out, err = run(capsys, "preflight", "--simulate", "B200=2,H100=1,T4=1", *LLAMA, "--engine", "flashinfer",
                       "--html", str(f))
    assert rc == 1 and f"wrote {f}" in err
    page = f.read_text()
    assert "<script src" not in page and "<link" not in page and "http://" not in page and "https://" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count('class="cell v-pass"') == 1 + 2  # group row + two B200 node rows


def test_html_escapes_hostile_names():
    from attnplan.preflight.html import render_html

    evil = '<img src=x onerror=alert(1)></script><script>alert(2)</script>'
    r = build_report(source="hosts", targets=[evil], configs=named(),
                     outcomes=[Outcome(name=evil, kind="error", reason=evil)])
    page = render_html(r)
    assert "<img src=x" not in page and "<script>alert(2)" not in page


# -- progress on a terminal ----------------------------------------------------------------------
class _Stream:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_progress_only_on_a_terminal():
    from attnplan.preflight.progress import Progress, ProgressSink

    tty = _Stream(True)
    p = Progress(3, tty, interval=0)
    sink = ProgressSink(p)
    sink[0] = "a"
    sink[0] = "a again"  # one node counts once
    sink[2] = "b"
    sink[1] = "c"
    assert "1/3 nodes answered" in tty.text and tty.text.rstrip().endswith("3/3 nodes answered")
    assert "2/3" in tty.text and "4/3" not in tty.text
    p.close()
    assert tty.text.endswith("\r\033[K")  # erased before the report
    pipe = _Stream(False)
    q = Progress(3, pipe, interval=0)
    for i in range(3):
        ProgressSink(q)[i] = i
    q.close()
    assert pipe.text == ""


def test_preflight_json_and_no_progress_when_stderr_is_not_a_terminal(capsys):
    rc, out, err = run(capsys, "preflight", "--simulate", "B200=2", *LLAMA, "--json")
    assert rc == 0 and json.loads(out)["summary"]["nodes"] == 2 and err == ""


# -- a node's answer for a whole model counts only when it is coherent ---------------------------
def _model_answer_json(device: str = "H100", **req):
    from attnplan.policy import default_ruleset
    from attnplan.preflight.configs import inline_model, model_request
    from attnplan.request import answer_json, plan_request

    r = inline_model(model_request(str(ROOT / "tests" / "models" / "gemma-3-27b-it.json"), None, req, None))
    nc = NamedConfig("gemma", None, None, r)
    node = simulated_node(device)
    rs = default_ruleset()
    return nc, answer_json(plan_request(r, node, rs), r, node, trace=False, rules_revision=rs.revision)


def test_model_answer_accepts_the_real_one_and_refuses_a_forged_verdict():
    import copy

    from attnplan.preflight.answers import BadAnswer
    from attnplan.preflight.model_answers import model_answer

    nc, data = _model_answer_json()
    a = model_answer(data, nc)
    assert a.ok and [g.kind for g in a.groups] == ["sliding", "full"] and len(a.groups[0].layers) == 52

    def refused(mutate, words):
        d = copy.deepcopy(data)
        mutate(d)
        with pytest.raises(BadAnswer) as e:
            model_answer(d, nc)
        assert words in str(e.value), str(e.value)

    def reject_group(d):  # a group rejected while the model says ok
        g = d["per_rank"]["layer_groups"][1]
        g.update(status="rejected", prefill=None, decode=None, attention=None, kv_cache=None, metadata=None,
                 violations=[{"rule": "x", "phase": "both", "message": "m"}])
    refused(reject_group, "status ok but a layer group or the model is rejected")
    refused(lambda d: d["per_rank"]["layer_groups"][0].update(prefill=None), "ok without a plan")
    refused(lambda d: d["request"].update(tensor_parallel_size=2), "answered for another request (tensor_parallel_size")
    refused(lambda d: d.update(status="maybe"), "status 'maybe'")
    refused(lambda d: d["per_rank"].update(layer_groups=d["per_rank"]["layer_groups"] * 200), "more than 256 layer groups")
    refused(lambda d: d["node"]["capability"].update(value="99.9"), "node")
    refused(lambda d: d.update(status="startup_error"), "startup_error without its message")

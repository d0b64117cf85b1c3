"""The attnplan CLI: exit codes, JSON contract, tables, bad input, examples, generated docs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from attnplan.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_ok_table_and_exit_0(capsys):
    rc, out, _ = run(capsys, "plan", "--device", "B200", *LLAMA)
    assert rc == 0
    assert "OK" in out and "trtllm-gen" in out and "HND" in out


def test_plan_rejected_exit_1_lists_rules_and_suggestions(capsys):
    rc, out, _ = run(capsys, "plan", "--device", "RTX PRO 6000", "--head-dim", "64", "--num-heads", "32",
                     "--num-kv-heads", "8", "--kv-cache-dtype", "nvfp4")
    assert rc == 1
    assert "REJECTED" in out and "vllm.nvfp4" in out and "engine vllm 0.33.0" in out
    assert "suggestions" in out and "kv_cache_dtype" in out


def test_plan_json_contract(capsys):
    rc, out, _ = run(capsys, "plan", "--capability", "10.3", "--flashinfer-version", "0.6.7", *LLAMA, "--json")
    assert rc == 0
    data = json.loads(out)
    assert set(data) >= {"status", "node", "config", "plan", "violations", "suggestions", "notes", "trace"}
    assert data["status"] == "ok"
    assert data["plan"]["prefill"]["backend"] == "fa2" and data["plan"]["decode"]["backend"] == "fa2"
    assert "metadata" in data["plan"]
    assert any("trtllm.sm103-hang" in n for n in data["notes"])
    assert data["node"]["capability"] == {"value": "10.3", "source": "declared", "detail": None}
    assert data["node"]["flashinfer_version"]["source"] == "declared"
    assert data["config"]["kv_cache_dtype"] == "auto" and data["config"]["num_qo_heads"] == 32
    assert all({"rule", "verdict", "inputs"} <= set(t) for t in data["trace"])


def test_plan_json_rejection_has_violation_fields(capsys):
    rc, out, _ = run(capsys, "plan", "--device", "H100", *LLAMA, "--attention-backend", "trtllm-gen", "--json")
    assert rc == 1
    data = json.loads(out)
    assert data["plan"] is None
    v = [x for x in data["violations"] if x["rule"] == "trtllm.family"]
    assert v and v[0]["observed"] == "9.0" and "node.capability" in v[0]["required"]
    assert v[0]["layer"] == "kernel" and data["engine"] == {"name": "vllm", "version": "0.33.0"}
    assert {"rule", "phase", "backend", "observed", "required", "message"} <= set(v[0])
    assert {"field": "attention_backend", "value": "auto"}.items() <= data["suggestions"][0].items()


@pytest.mark.parametrize("argv, field", [
    (["plan", "--device", "B2000", *LLAMA], "device"),
    (["plan", "--device", "B200", "--head-dim", "x", "--num-heads", "32"], "head_dim"),
    (["plan", "--device", "B200", "--head-dim", "0", "--num-heads", "32"], "head_dim"),
    (["plan", "--device", "B200", "--head-dim", "128", "--num-heads", "3.5"], "num_qo_heads"),
    (["plan", "--device", "B200", *LLAMA, "--kv-cache-dtype", "fp9"], "kv_cache_dtype"),
    (["plan", "--device", "B200", "--head-dim", "128"], "num_qo_heads"),
    (["plan", "--capability", "banana", *LLAMA], "capability"),
    (["plan", "--model-config", "/nonexistent/config.json"], "model_config"),
    (["plan", "--flashinfer-version", "0.6.7", *LLAMA], "device"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, field):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnplan: error:") and field in lines[0]
    assert "Traceback" not in err


def test_unknown_device_suggests_close_matches(capsys):
    _, _, err = run(capsys, "plan", "--device", "B2000", *LLAMA)
    assert "B200" in err


@pytest.mark.parametrize("content, word", [("{not json", "not valid JSON"), ('{"hidden_size": 4096}', "num_attention_heads"), ("[1]", "object")])
def test_bad_model_config(capsys, tmp_path, content, word):
    p = tmp_path / "config.json"
    p.write_text(content)
    rc, _, err = run(capsys, "plan", "--device", "B200", "--model-config", str(p))
    assert rc == 2 and word in err and len(err.strip().splitlines()) == 1


def test_flags_win_over_model_config(capsys):
    rc, out, _ = run(capsys, "plan", "--device", "B200", "--model-config", str(EXAMPLES / "llama-3.1-8b.json"),
                     "--kv-cache-dtype", "fp8", "--json", "--no-trace")
    data = json.loads(out)
    assert rc == 0 and data["config"]["kv_cache_dtype"] == "fp8" and data["config"]["head_dim"] == 128
    assert data["plan"]["kv_cache"]["kv_view_dtype"] == "float8_e4m3fn"
    assert "trace" not in data


def test_explain_grid(capsys):
    rc, out, _ = run(capsys, "explain", "--device", "H100", *LLAMA)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("RUNS ") and "FLASH_ATTN" in lines[0]  # the verdict leads: vLLM runs its own backend
    lines = lines[lines.index("") + 1:]  # the FlashInfer grid beneath it
    assert lines[1].startswith("engine layer: vllm 0.33.0")
    header = next(line for line in lines if line.startswith("rule ")).split()
    assert header[1] == "layer"
    for col in ("prefill/fa2", "prefill/fa3", "prefill/trtllm-gen", "decode/fa2", "decode/trtllm-gen", "decode/xqa"):
        assert col in header
    grid = {line.split()[0]: dict(zip(header[1:], line.split()[1:])) for line in lines[4:] if line and not line.startswith(" ")
            and len(line.split()) == len(header)}
    assert grid["trtllm.family"]["prefill/trtllm-gen"] == "FAIL" and grid["trtllm.family"]["decode/trtllm-gen"] == "FAIL"
    assert grid["trtllm.family"]["prefill/fa3"] == "-"
    assert grid["fa3.arch"]["prefill/fa3"] == "pass" and grid["device.cuda"]["pair"] == "pass"
    assert grid["vllm.xqa"]["layer"] == "engine" and grid["head-size"]["layer"] == "kernel"
    assert "selected: prefill fa3, decode xqa" in out
    assert "trtllm.family: node.capability=9.0" in out


def test_explain_engine_flashinfer_has_no_engine_rules(capsys):
    rc, out, _ = run(capsys, "explain", "--device", "H100", *LLAMA, "--engine", "flashinfer", "--json")
    data = json.loads(out)
    assert rc == 0 and data["engine"]["name"] == "flashinfer"
    assert data["selected"] == {"prefill": "fa3", "decode": "fa2"}
    assert {c["layer"] for c in data["cells"]} == {"kernel"}


@pytest.mark.parametrize("engine", ["sglang==0.4.0", "vllm==0.20.0", "vllm==x"])
def test_unknown_engine_is_exit_2_naming_the_covered_ones(capsys, engine):
    rc, _, err = run(capsys, "plan", "--device", "H100", *LLAMA, "--engine", engine)
    assert rc == 2 and err.count("\n") == 1
    assert "vllm==0.33.0" in err and "flashinfer" in err


def test_plan_engine_flashinfer_vs_vllm(capsys):
    rc, out, _ = run(capsys, "plan", "--device", "H100", *LLAMA, "--engine", "flashinfer", "--json", "--no-trace")
    assert rc == 0 and json.loads(out)["plan"]["decode"]["backend"] == "fa2"
    rc, out, _ = run(capsys, "plan", "--device", "H100", *LLAMA, "--engine", "vllm==0.33.0", "--json", "--no-trace")
    d = json.loads(out)
    assert rc == 0 and d["plan"]["decode"]["backend"] == "xqa" and d["plan"]["decode"]["call"] == "xqa_decode"


def test_explain_json(capsys):
    rc, out, _ = run(capsys, "explain", "--device", "B200", *LLAMA, "--json")
    data = json.loads(out)
    assert rc == 0 and data["selected"] == {"prefill": "trtllm-gen", "decode": "trtllm-gen"}
    cell = next(c for c in data["cells"] if c["rule"] == "fa3.arch" and c["phase"] == "prefill")
    assert cell["verdict"] == "fail" and cell["inputs"]["node.capability_major"] == "10.x"


def test_node_command_never_crashes_without_gpu(capsys):
    rc, out, _ = run(capsys, "node", "--json")
    data = json.loads(out)
    assert rc == 0 and "capability" in data["node"] and data["fingerprint"]


def test_rules_command_lists_every_rule(capsys):
    rc, out, _ = run(capsys, "rules", "--json")
    ids = {r["id"] for r in json.loads(out)["rules"]}
    assert rc == 0
    assert {"device.cuda", "trtllm.family", "trtllm.cubins", "kv.nvfp4-sm100f", "sinks", "head-size"} <= ids
    rules = {r["id"]: r for r in json.loads(out)["rules"]}
    from packaging.specifiers import SpecifierSet

    from attnplan.policy import default_ruleset

    # vLLM's XQA decode choice is the same in every modelled release: its range covers each of them
    assert rules["vllm.xqa"]["layer"] == "engine"
    assert all(v in SpecifierSet(rules["vllm.xqa"]["vllm"]) for v in default_ruleset().engines["vllm"].versions)
    assert rules["trtllm.sm103-hang"]["flashinfer"] == "<0.6.7.post2"
    assert all(r["verified"] is not None for r in rules.values())
    assert rules["trtllm.family"]["verified"]["source_only"]
    assert rules["head-size"]["verified"][0]["device"] == "H100"


def test_rules_table_shows_layer_and_provenance(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "4000")  # wide enough for the table (sources citing several releases run long)
    rc, out, _ = run(capsys, "rules")
    assert rc == 0 and "layer" in out.splitlines()[0] and "verified" in out.splitlines()[0]
    assert "consistent on H100 (9.0, flashinfer 0.7.2.post1" in out and "source only:" in out
    rc, out, _ = run(capsys, "rules", "--engine", "flashinfer")
    assert rc == 0 and "vllm.xqa" not in out and "head-size" in out


def test_capability_matrix_doc_is_not_stale(capsys):
    rc, out, _ = run(capsys, "matrix", "--format", "markdown")
    assert rc == 0
    committed = (ROOT / "docs" / "capability-matrix.md").read_text()
    assert out == committed, "docs/capability-matrix.md is stale: run `make matrix`"


def test_matrix_json_derives_from_rules(capsys):
    _, out, _ = run(capsys, "matrix", "--format", "json")
    rows = json.loads(out)["rows"]
    trt = [r for r in rows if r["backend"] == "trtllm-gen"]
    assert trt and all(set(r["capabilities"]) == {"10.0", "10.3"} for r in trt)
    assert all(512 in r["head_sizes"] for r in trt)
    assert all(512 not in r["head_sizes"] for r in rows if r["backend"] == "fa3" and r["model"] == "standard")
    assert all(512 in r["head_sizes"] for r in rows if r["backend"] == "fa2" and r["model"] == "standard")
    nvfp4 = {r["backend"] for r in rows if "nvfp4" in r["kv_cache_dtypes"] and r["model"] == "standard"}
    assert nvfp4 == {"trtllm-gen", "fa2", "xqa"}
    assert {c for r in rows if r["backend"] == "xqa" and "nvfp4" in r["kv_cache_dtypes"] for c in r["capabilities"]} <= {"12.0", "12.1"}
    fi = json.loads(run(capsys, "matrix", "--format", "json", "--engine", "flashinfer")[1])["rows"]
    assert [1, 8] == [p for p in next(r for r in fi if r["backend"] == "fa2")["page_sizes"] if p < 16]


def test_help_teaches(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "--head-dim" in out and "--model-config" in out and "--device" in out and "Exit 0" in out


def test_console_script_subprocess_bad_input_has_no_traceback():
    exe = Path(sys.executable).with_name("attnplan")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "attnplan"]
    r = subprocess.run(cmd + ["plan", "--device", "nope", *LLAMA], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1


# -- the shipped examples on the five devices the issue names ------------------------------
DEVICES = ("B200", "GB300", "H100", "RTX PRO 6000", "A100")


def _plan(capsys, model: str, device: str) -> dict:
    rc, out, _ = run(capsys, "plan", "--device", device, "--model-config", str(EXAMPLES / model), "--json", "--no-trace")
    data = json.loads(out)
    assert rc == (0 if data["verdict"]["outcome"] == "runs" else 1)  # the command's verdict decides the exit
    return data


def _family10(device: str) -> bool:
    return device in ("B200", "GB300")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", ["llama-3.1-8b.json", "qwen3-32b.json"])
def test_examples_gqa_models(capsys, model, device):
    d = _plan(capsys, model, device)
    p = d["plan"]
    assert d["status"] == "ok"
    expected = {"B200": ("trtllm-gen", "trtllm-gen"), "GB300": ("trtllm-gen", "trtllm-gen"),
                "H100": ("fa3", "xqa"), "RTX PRO 6000": ("fa2", "xqa"), "A100": ("fa2", "fa2")}[device]
    assert (p["prefill"]["backend"], p["decode"]["backend"]) == expected
    assert p["kv_cache"]["layout"] == ("HND" if _family10(device) else "NHD")
    assert p["decode"]["use_tensor_cores"] in (None, True)  # group size 4 and 8 -> tensor cores on native decode


@pytest.mark.parametrize("device", DEVICES)
def test_example_gpt_oss_sinks_on_9_0_10x_12x(capsys, device):
    d = _plan(capsys, "gpt-oss-120b.json", device)
    assert d["config"]["sinks"] is True and d["config"]["sliding_window"] == 128 and d["config"]["head_dim"] == 64
    if _family10(device):
        # gpt-oss alternates window-128 and full layers: two layer groups, each planned (issue 15)
        assert d["status"] == "ok" and len(d["layer_groups"]) == 2
        assert all(g["decode"]["backend"] == "trtllm-gen" for g in d["layer_groups"])
    elif device in ("H100", "RTX PRO 6000"):                 # vLLM 0.33: XQA decode, sink-wrapper prefill
        assert d["status"] == "ok" and all(g["decode"]["backend"] == "xqa" for g in d["layer_groups"])
        assert all(g["prefill"]["call"] == "sink" for g in d["layer_groups"])
    else:
        assert d["status"] == "rejected"
        assert any(v["rule"] == "vllm.sinks" and v["phase"] == "both" for v in d["violations"])


@pytest.mark.parametrize("device", DEVICES)
def test_example_gemma2_softcap_never_trtllm(capsys, device):
    d = _plan(capsys, "gemma-2-9b.json", device)
    assert d["config"]["logits_soft_cap"] == 50.0 and d["config"]["head_dim"] == 256
    if device != "A100":   # vLLM 0.33 runs XQA / trtllm-gen decode there and drops the soft cap (issue 21)
        assert d["status"] == "rejected"
        assert {"vllm.softcap-dropped"} <= {v["rule"] for g in d["layer_groups"] for v in g["violations"]}
        return
    assert d["status"] == "ok"
    # Gemma-2 alternates sliding and global layers: every group, in both phases, avoids trtllm-gen
    assert "trtllm-gen" not in {g[ph]["backend"] for g in d["layer_groups"] for ph in ("prefill", "decode")}
    if _family10(device):
        assert any("trtllm.softcap" in n for n in d["notes"])


@pytest.mark.parametrize("device", DEVICES)
def test_example_deepseek_mla(capsys, device):
    d = _plan(capsys, "deepseek-v3.json", device)
    assert d["config"]["kv_lora_rank"] == 512
    if not _family10(device):   # vLLM 0.33's FLASHINFER_MLA is 10.x only (issue 21): it serves MLA otherwise
        assert d["status"] == "rejected" and d["engine_backend"]["runs_flashinfer"] is False
        assert any(v["rule"] == "vllm.mla-backend" for v in d["violations"])
        return
    assert d["status"] == "ok"
    p = d["plan"]
    expected = {"B200": ("trtllm-ragged", "trtllm-gen-mla"), "GB300": ("trtllm-ragged", "trtllm-gen-mla"),
                "H100": ("fa3", "fa3-mla"), "RTX PRO 6000": ("fa2", "fa2-mla"), "A100": ("fa2", "fa2-mla")}[device]
    assert (p["prefill"]["backend"], p["decode"]["backend"]) == expected
    assert p["kv_cache"]["mla"] is True and p["kv_cache"]["head_dim_k"] == 576
    assert p["kv_cache"]["page_size"] == (32 if _family10(device) else 16)


# -- issue 27: terminal width, --json everywhere, presets by name, pipes, -q/-v, completion ----------
@pytest.mark.parametrize("columns", [60, 100, 160])
def test_rules_fit_the_terminal_width(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    rc, out, _ = run(capsys, "rules")
    assert rc == 0 and max(len(ln) for ln in out.splitlines()) <= columns
    from attnplan.policy import default_ruleset

    # Every rule is still there, with its provenance (the long field that made the table 500+ wide).
    assert all(f"{r.id}  [{r.layer}]" in out for r in default_ruleset().rules)
    assert "source only:" in out


def test_matrix_takes_json_like_every_command(capsys):
    rc, out, _ = run(capsys, "matrix", "--json")
    rc2, out2, _ = run(capsys, "matrix", "--format", "json")
    assert rc == rc2 == 0 and json.loads(out) == json.loads(out2)


def test_every_command_that_prints_a_result_takes_json():
    from attnplan.cli.completion import commands
    from attnplan.cli.main import build_parser

    # serve prints no result (it serves); completion prints a shell script; verify writes reports.
    no_result = {("serve",), ("completion",), ("verify",), ("vllm",), ("sglang",)}  # vllm/sglang: groups of subcommands
    cmds = [c for c in commands(build_parser()) if c.path and c.path not in no_result]
    assert {c.path for c in cmds} >= {("plan",), ("explain",), ("node",), ("rules",), ("matrix",), ("vllm", "serve")}
    missing = [c.path for c in cmds if "--json" not in c.flags]
    assert not missing, missing


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-2-9b", "qwen3-32b", "gpt-oss-120b", "deepseek-v3"])
def test_shipped_presets_are_named_by_model(capsys, name):
    from attnplan.presets import PRESETS_DIR

    rc, out, _ = run(capsys, "plan", "--device", "H100", "--model", name, "--json", "--no-trace")
    rc2, out2, _ = run(capsys, "plan", "--device", "H100", "--model-config", str(PRESETS_DIR / f"{name}.json"),
                       "--json", "--no-trace")
    assert rc == rc2 and json.loads(out)["plan" if "plan" in json.loads(out) else "status"] == \
        json.loads(out2)["plan" if "plan" in json.loads(out2) else "status"]


def test_a_local_directory_wins_over_a_preset_name(tmp_path, monkeypatch, capsys):
    d = tmp_path / "llama-3.1-8b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 8, "num_hidden_layers": 2,
                                               "num_key_value_heads": 8, "hidden_size": 1024}))
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(capsys, "plan", "--device", "H100", "--model", "llama-3.1-8b", "--json", "--no-trace")
    assert json.loads(out)["config"]["num_qo_heads"] == 8


def test_missing_model_hint_names_hf_download(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    rc, _, err = run(capsys, "plan", "--device", "H100", "--model", "acme/nothing-here")
    assert rc == 2 and "hf download acme/nothing-here config.json" in err and "huggingface-cli" not in err


# head 72 runs under vLLM (FLASH_ATTN) but not on FlashInfer alone: attnplan's adapter refuses it (exit 1)
REJECTED = ["plan", "--device", "H100", "--head-dim", "72", "--num-heads", "32", "--engine", "flashinfer"]


@pytest.mark.parametrize("reader", ["head -1 >/dev/null", "true"])
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_closed_pipe_keeps_the_verdict(extra, reader):
    # `attnplan plan ... | head -1`: the reader leaves early; the exit code is still "rejected".
    # `| true` closes the pipe before attnplan (0.3 s to start) writes a byte: a sure EPIPE.
    cmd = [sys.executable, "-m", "attnplan", *REJECTED, *extra]
    alone = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    piped = subprocess.run(["bash", "-c", " ".join(map(shlex.quote, cmd)) + f" | {reader}; "
                            "exit ${PIPESTATUS[0]}"], capture_output=True, text=True, env=ENV, timeout=120)
    assert alone.returncode == 1 and piped.returncode == 1, piped.stderr
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


def test_quiet_drops_notes_and_verbose_reports_time(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNPLAN_VLLM_PARSER", "subset")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "mystery", "num_attention_heads": 8, "hidden_size": 1024,
                               "num_hidden_layers": 2, "strange_field": 1}))
    rc, _, err = run(capsys, "vllm", "serve", str(cfg), "--device", "H100")
    assert "note:" in err and "strange_field" in err
    rc_q, _, err_q = run(capsys, "-q", "vllm", "serve", str(cfg), "--device", "H100")
    assert rc_q == rc and err_q == ""
    rc_v, _, err_v = run(capsys, "-v", "vllm", "serve", str(cfg), "--device", "H100")
    assert rc_v == rc and "attnplan: took" in err_v


def test_version_is_answered(capsys):
    rc = main(["--version"])
    out, _ = capsys.readouterr()
    from attnplan import __version__

    assert rc == 0 and out == f"attnplan {__version__}\n"


def test_version_imports_no_engine():
    code = ("import sys; from attnplan.cli.main import main; main(['--version']); "
            "print(sorted(m for m in sys.modules if m.startswith(('attnplan.policy', 'pydantic'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "[]", p.stdout + p.stderr


def _completion(shell: str) -> str:
    p = subprocess.run([sys.executable, "-m", "attnplan", "completion", shell], capture_output=True, text=True,
                       env=ENV, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _bash_complete(script: str, *words: str) -> list[str]:
    prog = (script + "\nCOMP_WORDS=(" + " ".join(shlex.quote(w) for w in words) + ")\n"
            f"COMP_CWORD={len(words) - 1}\n_attnplan\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\ncomplete -p attnplan\n")
    p = subprocess.run(["bash", "--norc", "-c", prog], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_bash_completion_follows_the_parser():
    script = _completion("bash")
    assert subprocess.run(["bash", "-n"], input=script, text=True, timeout=30).returncode == 0
    got = _bash_complete(script, "attnplan", "")
    assert "complete -o default -F _attnplan attnplan" in got
    assert {"plan", "explain", "rules", "matrix", "vllm", "serve", "completion"} <= set(got)
    assert _bash_complete(script, "attnplan", "matrix", "--format", "")[:2] == ["markdown", "json"]
    assert "serve" in _bash_complete(script, "attnplan", "vllm", "")
    assert "--kv-cache-dtype" in _bash_complete(script, "attnplan", "plan", "--kv")
    assert "--device" in _bash_complete(script, "attnplan", "vllm", "serve", "--dev")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_scripts(shell):
    import shutil

    script = _completion(shell)
    assert "plan" in script and "--kv-cache-dtype".lstrip("-") in script
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed: the script is generated but not parsed here")
    assert subprocess.run([shell, "-n"], input=script, text=True, timeout=30).returncode == 0


def test_warmup_progress_bar_only_on_a_terminal():
    import io

    from attnplan.cli.progress import warmup_progress

    assert warmup_progress(io.StringIO()) is None  # a pipe or a file: no bar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = warmup_progress(tty)
    for e in ({"event": "build-start", "modules": ["a", "b"]}, {"event": "module-loaded", "module": "a", "seconds": 1},
              {"event": "module-loaded", "module": "b", "seconds": 1}, {"event": "batch-kind-done", "kind": "mixed"},
              {"event": "done", "seconds": 3}):
        bar(e)
    text = tty.getvalue()
    assert text.count("\r") == 5 and text.endswith("\n")
    assert "1/5" in text and "3/5" in text and "module-loaded a" in text


def test_every_environment_variable_is_documented():
    """Each ATTNPLAN_* variable the package reads is in `attnplan --help` and in README's table."""
    import re as _re

    from attnplan.cli.main import EXAMPLES

    read = set()
    for p in (ROOT / "attnplan").rglob("*.py"):
        read |= set(_re.findall(r"ATTNPLAN_[A-Z_]+[A-Z]", p.read_text(encoding="utf-8")))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = {m for m in _re.findall(r"^\| `(ATTNPLAN_[A-Z_]+)", readme, _re.M)}
    assert read and read <= table, sorted(read - table)
    assert read <= set(_re.findall(r"ATTNPLAN_[A-Z_]+[A-Z]", EXAMPLES)), sorted(read - set(_re.findall(r"ATTNPLAN_[A-Z_]+[A-Z]", EXAMPLES)))

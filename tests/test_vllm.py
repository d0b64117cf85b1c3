"""`attnplan vllm serve` and vLLM's vocabulary in the shared flags, with attnplan's own subset
parser (ATTNPLAN_VLLM_PARSER=subset); tests/test_vllm_real.py runs the same through vLLM itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnplan.cli.main import main
from attnplan.policy import InvalidInputError
from attnplan.vllm.backends import VLLM_TO_ATTNPLAN, backend_choice
from attnplan.vllm.mapping import per_rank_heads, startup_errors

MODELS = Path(__file__).parent / "models"
LLAMA = str(MODELS / "vllm-llama-3.1-8b")
FALCON = str(MODELS / "vllm-falcon-40b")
DSV3 = str(MODELS / "vllm-deepseek-v3")


@pytest.fixture(autouse=True)
def subset_parser(monkeypatch):
    monkeypatch.setenv("ATTNPLAN_VLLM_PARSER", "subset")


def cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_exit_2(rc, err):
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


# -- vLLM's per-rank arithmetic (config/model.py get_num_attention_heads / get_num_kv_heads) ----
@pytest.mark.parametrize("heads,kv,tp,want", [(32, 8, 1, (32, 8)), (32, 8, 4, (8, 2)), (32, 8, 8, (4, 1)),
                                             (32, 8, 16, (2, 1)), (128, 8, 32, (4, 1)), (64, 64, 8, (8, 8))])
def test_per_rank_heads(heads, kv, tp, want):
    assert per_rank_heads(heads, kv, tp) == want


def test_startup_errors_match_vllm_wording():
    assert startup_errors(32, 8, 3) == ["Total number of attention heads (32) must be divisible by tensor parallel size (3)."]
    assert "greater than the model's total number of KV heads (8)" in startup_errors(32, 8, 8, dcp=2)[0]
    assert startup_errors(32, 8, 16, dcp=2) == []
    assert startup_errors(128, 1, 8, dcp=2, mla=True) == []


# -- backend names ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["FLASHINFER", "flashinfer", "FlashInfer_MLA", "trtllm_ragged", "fa3", "trtllm-gen"])
def test_backend_names_map(name):
    got = backend_choice(name)
    assert got == VLLM_TO_ATTNPLAN.get(name.upper(), name.lower().replace("_", "-"))


@pytest.mark.parametrize("name,outcome", [("FLASH_ATTN", "runs"), ("triton_attn", "runs"), ("FLEX_ATTENTION", "runs"),
                                          ("CUTLASS_MLA", "fails-at-startup")])
def test_non_flashinfer_vllm_backend_is_vllms_own(name, outcome, capsys):
    # vLLM takes its own backends by name: the verdict says what vLLM does with them (CUTLASS_MLA is an MLA
    # backend: vLLM refuses it for Llama at startup), and that attnplan does not model their kernels
    assert backend_choice(name) == name.upper()
    rc, out, _err = cli(capsys, "plan", "--device", "B200", "--model", LLAMA, "--attention-backend", name, "--json")
    v = json.loads(out)["verdict"]
    assert (v["outcome"], v["modelled"], v["selected"]["decode"]) == (outcome, False, name.upper())
    assert rc == (0 if outcome == "runs" else 1)


def test_flashinfer_mla_forces_trtllm_gen_mla(capsys):
    rc, out, _err = cli(capsys, "plan", "--device", "B200", "--model", DSV3, "--attention-backend", "FLASHINFER_MLA",
                        "--json", "--no-trace")
    data = json.loads(out)
    # vLLM's FLASHINFER_MLA: FlashInfer MLA decode, with vLLM's own MLA prefill choice (issue 21)
    assert data["config"]["attention_backend"] == "flashinfer-mla"
    if rc == 0:
        assert data["plan"]["decode"]["backend"] == "trtllm-gen-mla"


# -- shared flags: plan speaks vLLM ----------------------------------------------------------
def test_plan_tensor_parallel_block_size_speculative_dtype_auto(capsys):
    rc, out, err = cli(capsys, "plan", "--device", "H100", "--model", LLAMA, "--tensor-parallel-size", "4",
                       "--block-size", "32", "--dtype", "auto",
                       "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 3}', "--json", "--no-trace")
    assert rc in (0, 1), err
    c = json.loads(out)["config"]
    assert (c["num_qo_heads"], c["num_kv_heads"], c["page_size"], c["num_speculative_tokens"], c["dtype"]) == \
        (8, 2, 32, 3, "bf16")


def test_dtype_auto_reads_the_model_dtype(tmp_path, capsys):
    data = json.loads((Path(LLAMA) / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "torch_dtype": "float16"}))
    rc, out, _ = cli(capsys, "plan", "--device", "H100", "--model", str(tmp_path), "--dtype", "auto", "--json", "--no-trace")
    assert json.loads(out)["config"]["dtype"] == "fp16"


@pytest.mark.parametrize("argv", [
    ["--speculative-config", "{bad json"], ["--speculative-config", "[1, 2]"],
    ["--speculative-config", '{"method": "eagle"}'], ["--tensor-parallel-size", "0"],
    ["--tensor-parallel-size", "-2"], ["--tensor-parallel-size", "two"], ["--kv-cache-dtype", "bf16"],
])
def test_plan_malformed_vllm_flags_exit_2(capsys, argv):
    # malformed input (a split that is no positive integer, a --kv-cache-dtype vLLM's CacheDType lacks): exit 2
    rc, _out, err = cli(capsys, "plan", "--device", "H100", "--model", LLAMA, *argv)
    one_line_exit_2(rc, err)


@pytest.mark.parametrize("as_json", [False, True])
def test_plan_of_a_split_vllm_refuses_is_its_startup_failure(capsys, as_json):
    # vLLM refuses -tp 3 for 32 heads at startup (an outcome, fails-at-startup): plan says what `vllm serve -tp 3`
    # says, in vLLM's words, with its exit code (1), table and --json alike
    extra = ["--json", "--no-trace"] if as_json else []
    rc, out, err = cli(capsys, "plan", "--device", "H100", "--model", LLAMA, "--tensor-parallel-size", "3", *extra)
    rc_serve, serve, _ = cli(capsys, "vllm", "serve", LLAMA, "-tp", "3", "--device", "H100", *extra)
    assert rc == rc_serve == 1 and not err
    if as_json:
        assert json.loads(out)["verdict"] == json.loads(serve)["verdict"]
        assert json.loads(out)["verdict"]["outcome"] == "fails-at-startup"
    else:
        assert out.startswith("FAILS-AT-STARTUP") and "must be divisible by tensor parallel size (3)" in out
        assert out.splitlines()[0] in serve.splitlines()


# -- attnplan vllm serve ---------------------------------------------------------------------
def test_serve_per_rank_json(capsys):
    rc, out, err = cli(capsys, "vllm", "serve", FALCON, "-tp", "16", "--kv-cache-dtype", "fp8", "--device", "B200",
                       "--json", "--no-trace")
    data = json.loads(out)
    assert data["ranks"] == 16 and data["vllm"]["parser"] == "subset"
    c = data["per_rank"]["config"]
    assert (c["num_qo_heads"], c["num_kv_heads"], c["kv_cache_dtype"]) == (8, 1, "fp8")
    assert rc == (0 if data["per_rank"]["status"] == "ok" else 1)


def test_serve_startup_error(capsys):
    rc, out, _ = cli(capsys, "vllm", "serve", LLAMA, "--tensor-parallel-size", "3", "--device", "B200")
    assert rc == 1 and "must be divisible by tensor parallel size (3)" in out


def test_serve_names_the_rule_of_a_later_failure(capsys):
    # vLLM 0.33 serves an nvfp4 KV cache on families 8/9/10/12 only: Jetson Thor (11.0) is refused,
    # and the answer names the rule and when vLLM would fail; the H100 serves it (fa2).
    # There no backend of vLLM's takes it: vLLM refuses at startup, FlashInfer's refusal among the rules.
    rc, out, _ = cli(capsys, "vllm", "serve", LLAMA, "--kv-cache-dtype", "nvfp4", "--device", "Jetson Thor")
    assert rc == 1 and "FAILS-AT-STARTUP" in out and "No valid attention backend found" in out
    rc, out, _ = cli(capsys, "vllm", "serve", LLAMA, "--kv-cache-dtype", "nvfp4", "--device", "Jetson Thor", "--json")
    assert "vllm.nvfp4" in json.loads(out)["verdict"]["rules"]
    rc, out, _ = cli(capsys, "vllm", "serve", LLAMA, "--kv-cache-dtype", "nvfp4", "--device", "H100")
    assert rc == 0 and "OK" in out


@pytest.mark.parametrize("argv", [
    [LLAMA, "--port", "8000"], [LLAMA, "--speculative-config", "{nope"], ["acme/uncached-model"],
    [str(MODELS)], [LLAMA, "--attention-backend", "NO_SUCH_BACKEND"], [LLAMA, "--device", ""], [],
])
def test_serve_bad_input_exit_2(capsys, argv, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    args = ["vllm", "serve", *argv] + ([] if "--device" in argv else ["--device", "B200"])
    rc, _out, err = cli(capsys, *args)
    one_line_exit_2(rc, err)


def test_serve_unknown_flag_is_named(capsys):
    rc, _out, err = cli(capsys, "vllm", "serve", LLAMA, "--gpu-memory-utilization", "0.9", "--device", "B200")
    assert rc == 2 and "--gpu-memory-utilization" in err and "install vllm" in err


def test_serve_layered_model_planned_per_group_names_each_later_failure(capsys):
    # gpt-oss: window-128 and full layers, sinks everywhere; vLLM 0.33 serves sinks only on 9.0/10.x/12.x
    model = str(MODELS / "gpt-oss-20b.json")
    assert main(["vllm", "serve", model, "-tp", "2", "--device", "H100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    groups = data["per_rank"]["layer_groups"]
    assert len(groups) == 2 and {g["attention"]["window_left"] for g in groups} == {127, -1}
    assert all(g["config"]["num_qo_heads"] == 32 for g in groups)   # per rank: 64 / tp 2
    # on the A100 vLLM runs sinks on TRITON_ATTN: the line runs; forced onto FlashInfer it would fail
    assert main(["vllm", "serve", model, "--device", "A100"]) == 0
    assert "RUNS" in capsys.readouterr().out
    assert main(["vllm", "serve", model, "--device", "A100", "--attention-backend", "FLASHINFER"]) == 1
    out = capsys.readouterr().out
    assert "2 layer groups" in out
    assert sum("vLLM would fail" in line and "[vllm.sinks]" in line for line in out.splitlines()) >= 2


# -- issue 24 items (in this command's files) -------------------------------------------------------
@pytest.mark.parametrize("flag,name", [("-tp", "tensor-parallel-size"), ("-pp", "pipeline-parallel-size"),
                                       ("-dcp", "decode-context-parallel-size")])
def test_zero_parallel_size_exits_2_naming_the_flag(capsys, flag, name):
    rc, _, err = cli(capsys, "vllm", "serve", LLAMA, "--device", "B200", flag, "0")
    assert rc == 2 and f"--{name} must be at least 1, got 0" in err


@pytest.mark.parametrize("value", ["1e400", "inf", "nan", "-inf", "1.5K", "12x"])
def test_unreadable_max_model_len_exits_2(capsys, value):
    rc, _, err = cli(capsys, "vllm", "serve", LLAMA, "--device", "B200", "--max-model-len", value)
    assert rc == 2 and "max-model-len" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value,want", [("8K", 8192), ("25.6k", 25600), ("4096", 4096), ("auto", None), ("-1", None)])
def test_max_model_len_reads_as_vllms_human_readable_int(value, want):
    from attnplan.vllm.args import parse_serve_line

    assert parse_serve_line([LLAMA, "--max-model-len", value]).max_model_len == want


def _yarn_list_config(tmp_path: Path, **extra) -> Path:
    # A config attnplan's own reader leaves to transformers (an unknown key), whose rope
    # validation warns about the list-valued rope_type: that warning is not attnplan's output.
    data = {"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
            "num_hidden_layers": 4, "max_position_embeddings": 32768, "unknown_thing": 1,
            "rope_scaling": {"rope_type": ["yarn"], "factor": 4.0}, **extra}
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.skipif(__import__("importlib").util.find_spec("transformers") is None, reason="needs transformers")
@pytest.mark.parametrize("extra_argv,rc_want", [([], 0), (["-tp", "0"], 2), (["--dtype", "float64x"], 2)])
def test_transformers_warnings_do_not_reach_stderr(tmp_path, extra_argv, rc_want):
    import os
    import subprocess
    import sys

    model = _yarn_list_config(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), ATTNPLAN_VLLM_PARSER="subset")
    p = subprocess.run([sys.executable, "-m", "attnplan", "vllm", "serve", str(model), "--device", "H100", *extra_argv],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == rc_want, p.stderr
    assert "[transformers]" not in p.stderr and "Warning" not in p.stderr
    if rc_want == 2:
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr

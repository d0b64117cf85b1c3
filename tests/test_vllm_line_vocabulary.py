"""A `vllm serve` line in vLLM 0.33's own vocabulary (issue 36 item 5): from the wheel (no vLLM installed) every
flag vLLM takes is read with its shipped flag table and those that do not change attention are listed as
ignored; --kv-cache-dtype is exactly vLLM's CacheDType."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnplan.cli.main import main
from attnplan.policy import InvalidInputError
from attnplan.policy.dtypes import VLLM_CACHE_DTYPES
from attnplan.vllm import args

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ["--port", "8000", "--gpu-memory-utilization", "0.9", "--enable-prefix-caching", "--max-num-seqs", "256",
              "--served-model-name", "llama", "--disable-log-requests"]


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.delenv("ATTNPLAN_VLLM_PARSER", raising=False)
    monkeypatch.setattr(args, "vllm_available", lambda: False)


def test_production_flags_are_accepted_and_listed_as_ignored(no_vllm, capsys):
    line = args.parse_serve_line(["llama-3.1-8b", "-tp", "2", "--kv-cache-dtype", "fp8", *PRODUCTION])
    assert (line.parser, line.tensor_parallel_size, line.kv_cache_dtype) == ("table", 2, "fp8")
    assert line.ignored == ("--port", "--gpu-memory-utilization", "--enable-prefix-caching", "--max-num-seqs",
                            "--served-model-name", "--disable-log-requests")
    rc = main(["vllm", "serve", "llama-3.1-8b", *PRODUCTION, "--device", "B200"])
    out, err = capsys.readouterr()
    assert rc == 0 and "--gpu-memory-utilization" in err and "do not change attention" in err
    assert "vLLM 0.33.0's flag table (shipped)" in out


def test_a_flag_vllm_does_not_take_is_bad_input(no_vllm, capsys):
    with pytest.raises(InvalidInputError, match="unrecognized arguments: --gpu-memory-utilisation"):
        args.parse_serve_line(["llama-3.1-8b", "--gpu-memory-utilisation", "0.9"])
    rc = main(["vllm", "serve", "llama-3.1-8b", "--config", "x.yaml", "--device", "B200"])
    assert rc == 2 and "install vllm" in capsys.readouterr().err


@pytest.mark.parametrize("spelling", ["fp4", "bf16", "half", "fp8_e4m3fn"])
def test_spellings_vllm_refuses_exit_2(spelling, capsys):
    rc = main(["vllm", "serve", "llama-3.1-8b", "--kv-cache-dtype", spelling, "--device", "B200"])
    err = capsys.readouterr().err
    assert rc == 2 and "CacheDType" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("spelling,kv", [("float16", "fp16"), ("bfloat16", "bf16"), ("fp8", "fp8"), ("nvfp4", "nvfp4"),
                                         ("fp8_e5m2", "fp8_e5m2")])
def test_vllms_own_spellings_are_planned(spelling, kv, capsys):
    rc = main(["vllm", "serve", "llama-3.1-8b", "--kv-cache-dtype", spelling, "--device", "B200", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and data["per_rank"]["config"]["kv_cache_dtype"] == kv


@pytest.mark.parametrize("spelling", ["nvfp4_4over6", "fp8_ds_mla", "turboquant_k8v4"])
def test_vllm_layouts_attnplan_does_not_model_are_named(spelling, capsys):
    rc = main(["vllm", "serve", "llama-3.1-8b", "--kv-cache-dtype", spelling, "--device", "B200"])
    err = capsys.readouterr().err
    assert rc == 2 and "no FlashInfer kernel attnplan models" in err and spelling in err


# vLLM is imported in a process of its own: its platform, once chosen in a process, shapes every config it
# builds later (tests/test_vllm_real.py builds real VllmConfigs in this one).
def _vllm(code: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("vllm") is None or importlib.metadata.version("vllm") != args.SHIPPED_VERSION:
        pytest.skip("vllm 0.33.0 is not installed")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_the_cache_dtype_table_is_vllms():
    r = _vllm("from typing import get_args; from vllm.config.cache import CacheDType; "
              "from attnplan.policy.dtypes import VLLM_CACHE_DTYPES; "
              "print(set(VLLM_CACHE_DTYPES) == set(get_args(CacheDType)))")
    assert r.stdout.strip().splitlines()[-1] == "True", r.stderr[-2000:]


def test_the_shipped_flag_table_is_the_installed_vllms():
    r = _vllm("import runpy, sys; sys.argv = ['x', '--check']; runpy.run_path('scripts/vllm_flag_table.py', run_name='__main__')")
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:] + "\nregenerate: python scripts/vllm_flag_table.py"

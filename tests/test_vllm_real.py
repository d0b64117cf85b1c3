"""Against the real vLLM 0.33 package, as far as it runs on a CPU-only machine.

Exercised here: entry-point discovery (importlib.metadata), vLLM's own ``vllm serve`` parser,
``config_from_vllm`` over a real ``VllmConfig`` built by ``EngineArgs.create_engine_config()``
under vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu: the CUDA platform needs a GPU), and the
plugin's wrap of the real ``vllm.v1.worker.gpu_worker.Worker.load_model``. Not exercised
without a GPU: a GPU ``Worker`` object (its ``__init__`` needs CUDA; a SimpleNamespace holding
the real VllmConfig stands in for ``self``), the CUDA platform's own config updates
(``CudaPlatform.check_and_update_config``: its default block size and backend choice) and a
real ``vllm serve`` start that the plugin stops.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # before vLLM is imported: no GPU platform here
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from attnplan.cli.main import main  # noqa: E402
from attnplan.policy import InvalidInputError, UnsupportedConfigurationError  # noqa: E402

MODELS = Path(__file__).parent / "models"
LLAMA = str(MODELS / "vllm-llama-3.1-8b")
FALCON = str(MODELS / "vllm-falcon-40b")


@pytest.fixture(autouse=True)
def real_parser(monkeypatch, tmp_path_factory):
    monkeypatch.delenv("ATTNPLAN_VLLM_PARSER", raising=False)
    # The flag-table cache of this test session, never the user's.
    monkeypatch.setenv("ATTNPLAN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "attnplan-cache"))


def engine_config(model: str, **kw):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=model, skip_tokenizer_init=True, **kw).create_engine_config()


@pytest.fixture(scope="module")
def llama_tp4_fp8():
    return engine_config(LLAMA, tensor_parallel_size=4, kv_cache_dtype="fp8", block_size=32)


def test_entry_point_is_discoverable():
    eps = [ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins") if ep.name == "attnplan"]
    if not eps:
        pytest.skip("attnplan's vllm.general_plugins entry point is not installed (pip install -e .[vllm])")
    from attnplan.vllm.plugin import register

    assert eps[0].value == "attnplan.vllm.plugin:register" and eps[0].load() is register


def test_vllm_discovers_the_entry_point_line_attnplan_ships(tmp_path, monkeypatch):
    """The exact entry-point line of pyproject.toml, in a minimal dist-info, found by vLLM's own
    loader (vllm/plugins/__init__.py load_plugins_by_group)."""
    from vllm.plugins import load_plugins_by_group

    from attnplan.vllm.plugin import register

    d = tmp_path / "attnplan_ep_probe-0.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: attnplan-ep-probe\nVersion: 0\n")
    (d / "entry_points.txt").write_text("[vllm.general_plugins]\nattnplan = attnplan.vllm.plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    importlib.invalidate_caches()
    assert load_plugins_by_group("vllm.general_plugins").get("attnplan") is register


def test_vllm_parser_reads_a_serve_line():
    from attnplan.vllm.args import parse_serve_line

    line = parse_serve_line([LLAMA, "-tp", "4", "--port", "9000", "--gpu-memory-utilization", "0.85",
                             "--max-model-len", "32k", "--attention-backend", "FLASHINFER",
                             "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, '
                                                     '"prompt_lookup_max": 4}'])
    assert line.parser == "vllm"
    assert (line.tensor_parallel_size, line.max_model_len, line.attention_backend) == (4, 32000, "FLASHINFER")
    assert line.speculative["num_speculative_tokens"] == 4 and line.dtype == "auto" and line.block_size is None
    assert parse_serve_line([LLAMA, "--attention-config", '{"backend": "FLASHINFER_MLA"}']).attention_backend == \
        "FLASHINFER_MLA"
    for bad in (["--no-such-flag"], ["--speculative-config", "{bad"], ["-tp", "four"]):
        with pytest.raises(InvalidInputError):
            parse_serve_line([LLAMA, *bad])


def test_config_from_vllm_matches_the_serve_line_mapping(llama_tp4_fp8):
    from attnplan.vllm.args import parse_serve_line
    from attnplan.vllm.mapping import config_from_vllm
    from attnplan.request import plan_serve
    from attnplan.policy import simulated_node

    live = config_from_vllm(llama_tp4_fp8)
    mc, pc = llama_tp4_fp8.model_config, llama_tp4_fp8.parallel_config
    assert (live.num_qo_heads, live.kv_heads, live.head_dim) == (
        mc.get_num_attention_heads(pc), mc.get_num_kv_heads(pc), mc.get_head_size()) == (8, 2, 128)
    assert (live.kv_cache_dtype, live.page_size, live.dtype) == ("fp8", 32, "bf16")
    line = parse_serve_line([LLAMA, "-tp", "4", "--kv-cache-dtype", "fp8", "--block-size", "32"])
    assert plan_serve(line, simulated_node("B200")).config == live


def test_falcon_40b_per_rank_kv_heads_replicated():
    from attnplan.vllm.mapping import config_from_vllm

    vc = engine_config(FALCON, tensor_parallel_size=16)
    c = config_from_vllm(vc)
    assert (c.num_qo_heads, c.kv_heads) == (8, 1)


def test_cli_serve_through_vllm_parser(capsys):
    rc = main(["vllm", "serve", LLAMA, "-tp", "4", "--gpu-memory-utilization", "0.9", "--enable-prefix-caching",
               "--device", "H100", "--json", "--no-trace"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["vllm"]["parser"] == "vllm" and data["per_rank"]["config"]["num_qo_heads"] == 8
    assert rc == (0 if data["status"] == "ok" else 1)


def _checked_load_model(monkeypatch):
    from vllm.v1.worker.gpu_worker import Worker

    from attnplan.vllm.plugin import register

    monkeypatch.setattr(Worker, "load_model", Worker.load_model)  # undone after the test
    register()
    register()  # idempotent: vLLM calls general plugins in several places per process
    assert getattr(Worker.load_model, "_attnplan_checked", False)
    return Worker.load_model


def _starts(load_model, vllm_config) -> None:
    """The plugin lets vLLM go on: vLLM's own load_model runs (and fails here for want of a real GPU worker,
    which is not attnplan's error)."""
    with pytest.raises(Exception) as exc:
        load_model(SimpleNamespace(vllm_config=vllm_config))
    assert not isinstance(exc.value, UnsupportedConfigurationError), exc.value


def test_plugin_refuses_what_vllm_runs_on_flashinfer_and_would_not_run(tmp_path, monkeypatch):
    load_model = _checked_load_model(monkeypatch)
    gemma = tmp_path / "gemma-2-9b"
    gemma.mkdir()
    (gemma / "config.json").write_text((MODELS / "gemma-2-9b.json").read_text())
    vc = engine_config(str(gemma))
    # A GPU Worker cannot be constructed on a CPU machine: the stand-in holds the real VllmConfig.
    # On a B200 vLLM picks FLASHINFER, whose trtllm-gen decode drops Gemma-2's soft cap: wrong output, refused.
    monkeypatch.setenv("ATTNPLAN_VLLM_DEVICE", "B200")
    with pytest.raises(UnsupportedConfigurationError) as exc:
        load_model(SimpleNamespace(vllm_config=vc))
    assert exc.value.answer.verdict.outcome == "wrong-output" and "vllm.softcap-dropped" in str(exc.value)
    # On an H100 vLLM runs FLASH_ATTN (it applies the cap): one log line, vLLM goes on.
    monkeypatch.setenv("ATTNPLAN_VLLM_DEVICE", "H100")
    _starts(load_model, vc)


def test_plugin_never_stops_a_backend_of_vllms_own(llama_tp4_fp8, monkeypatch):
    load_model = _checked_load_model(monkeypatch)
    monkeypatch.setenv("ATTNPLAN_VLLM_DEVICE", "H100")
    dsv3 = engine_config(str(MODELS / "vllm-deepseek-v3"), tensor_parallel_size=8)
    _starts(load_model, dsv3)  # vLLM serves DeepSeek-V3 on FLASH_ATTN_MLA on an H100
    flash = engine_config(LLAMA, tensor_parallel_size=4, attention_backend="FLASH_ATTN")
    from attnplan.vllm.mapping import config_from_vllm

    assert config_from_vllm(flash).engine_attention_backend == "FLASH_ATTN"
    _starts(load_model, flash)
    # where vLLM itself finds no backend (an nvfp4 cache on Jetson Thor), the refusal is vLLM's own
    monkeypatch.setenv("ATTNPLAN_VLLM_DEVICE", "Jetson Thor")
    _starts(load_model, engine_config(LLAMA, tensor_parallel_size=4, kv_cache_dtype="nvfp4"))
    # and what vLLM runs on FlashInfer and runs well passes too
    monkeypatch.setenv("ATTNPLAN_VLLM_DEVICE", "B200")
    _starts(load_model, llama_tp4_fp8)


def test_plugin_can_be_turned_off(monkeypatch):
    from vllm.v1.worker.gpu_worker import Worker

    from attnplan.vllm.plugin import register

    # An earlier test may have let vLLM's own plugin loader wrap it for good: start from vLLM's own
    # method (functools.wraps keeps it as __wrapped__), restored after the test.
    original = Worker.load_model
    while getattr(original, "_attnplan_checked", False):
        original = original.__wrapped__
    monkeypatch.setattr(Worker, "load_model", original)
    monkeypatch.setenv("ATTNPLAN_VLLM_PLUGIN", "off")
    register()
    assert Worker.load_model is original


def test_config_from_vllm_mla_matches_the_serve_line_mapping():
    from attnplan.policy import simulated_node
    from attnplan.vllm import config_from_vllm
    from attnplan.vllm.args import parse_serve_line
    from attnplan.request import plan_serve

    dsv3 = str(MODELS / "vllm-deepseek-v3")
    vc = engine_config(dsv3, tensor_parallel_size=8, block_size=64)
    live = config_from_vllm(vc)
    assert vc.model_config.use_mla and live.is_mla
    assert (live.num_qo_heads, live.kv_lora_rank, live.qk_rope_head_dim) == (16, 512, 64)
    # The block size is the platform's final word (vLLM's CPU platform resets MLA's to 16 here,
    # CudaPlatform.check_and_update_config picks per backend): config_from_vllm reads what it set.
    assert live.page_size == vc.cache_config.block_size
    line = parse_serve_line([dsv3, "-tp", "8", "--block-size", "64"])
    from_line = plan_serve(line, simulated_node("B200")).config
    assert from_line.replace(page_size=None) == live.replace(page_size=None)


def test_config_from_vllm_reads_speculative_tokens():
    from attnplan.vllm import config_from_vllm

    # vLLM's CPU platform builds this config (an exception here is a failure, not a skip).
    vc = engine_config(LLAMA, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                                  "prompt_lookup_max": 3})
    assert config_from_vllm(vc).num_speculative_tokens == 3


@pytest.mark.parametrize("argv", [
    [LLAMA],
    [LLAMA, "-tp", "4", "-pp", "2", "--dtype", "float16", "--kv-cache-dtype", "fp8_e5m2", "--block-size", "32"],
    ["--model", LLAMA, "--decode-context-parallel-size", "2", "--attention-backend", "FLASHINFER",
     "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}', "--max-model-len", "8K",
     "--hf-overrides", '{"num_key_value_heads": 4}', "--trust-remote-code"],
])
def test_subset_parser_agrees_with_vllms_parser(argv, monkeypatch):
    """The fallback subset reads every flag it accepts exactly as vLLM's own parser does."""
    import dataclasses

    from attnplan.vllm.args import parse_serve_line

    real = parse_serve_line(argv)
    monkeypatch.setenv("ATTNPLAN_VLLM_PARSER", "subset")
    subset = parse_serve_line(argv)
    assert (real.parser, subset.parser) == ("vllm", "subset")
    assert dataclasses.replace(real, parser="x") == dataclasses.replace(subset, parser="x")


# -- issue 27: vLLM's flag table, extracted once per installed vLLM and cached ----------------------
@pytest.fixture()
def table_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNPLAN_CACHE_DIR", str(tmp_path))
    return tmp_path


TABLE_LINES = [
    [LLAMA],
    [LLAMA, "-tp", "4", "-pp", "2", "--dtype", "float16", "--kv-cache-dtype", "fp8_e5m2", "--block-size", "32"],
    ["--model", LLAMA, "--decode-context-parallel-size", "2", "--attention-backend", "FLASHINFER",
     "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}', "--max-model-len", "8K",
     "--hf-overrides", '{"num_key_value_heads": 4}', "--trust-remote-code"],
    [LLAMA, "--enable-prefix-caching", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64",
     "--max-model-len=25.6k", "--disable-chunked-prefill", "--port", "8001", "--host", "127.0.0.1"],
    [LLAMA, "--tensor-parallel-size=2", "--kv-cache-dtype=fp8", "--max-model-len", "auto",
     "--attention-config", '{"backend": "FLASHINFER"}', "--disable-log-stats", "--revision", "main"],
    [LLAMA, "--max-model", "4096", "--enforce-eager", "--seed", "7", "--quantization", "fp8"],
    [LLAMA, "--no-enable-chunked-prefill", "--disable-chunked-prefill", "--no-enable-prefix-caching"],  # hidden spellings vLLM still takes
]


@pytest.mark.parametrize("argv", TABLE_LINES)
def test_cached_flag_table_reads_lines_as_vllms_parser(argv, table_dir):
    import argparse

    from attnplan.vllm.args import _table_parser, _vllm_parser, extract_flag_table, line_from_namespace

    table = json.loads(json.dumps(extract_flag_table(_vllm_parser())))  # as stored: JSON
    real = line_from_namespace(_vllm_parser().parse_args(list(argv)), "vllm")
    cached = line_from_namespace(_table_parser(table).parse_args(list(argv)), "vllm")
    assert real == cached
    assert isinstance(_table_parser(table).parse_args(list(argv)), argparse.Namespace)


@pytest.mark.parametrize("argv", [
    [LLAMA, "--no-such-flag"], [LLAMA, "-tp", "x"],
    [LLAMA, "--max-model-len", "1e400"], [LLAMA, "--max-model-len", "inf"], [LLAMA, "--max-model-len", "1.5K"],
    [LLAMA, "--dtype", "float64x"], [LLAMA, "--gpu-memory-utilization", "lots"], [LLAMA, "--enforce-eager", "yes"],
])
def test_cached_flag_table_refuses_what_vllms_parser_refuses(argv):
    from attnplan.vllm.args import _table_parser, _vllm_parser, extract_flag_table

    table = json.loads(json.dumps(extract_flag_table(_vllm_parser())))
    with pytest.raises(InvalidInputError):
        _vllm_parser().parse_args(list(argv))
    with pytest.raises(InvalidInputError):
        _table_parser(table).parse_args(list(argv))


def test_flag_table_is_built_once_and_a_stale_one_is_rebuilt(table_dir, monkeypatch):
    import attnplan.vllm.args as va

    assert va.flag_table() is None  # nothing cached yet: the real parser reads the line
    assert va.parse_serve_line([LLAMA, "-tp", "2"]).tensor_parallel_size == 2
    path = va.table_path()
    assert path is not None and path.parent == table_dir and va.flag_table() is not None
    assert importlib.metadata.version("vllm") in path.name
    # Another vLLM's table under this name is stale: not used, and the next line rebuilds it.
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "vllm": "0.0.1"}))
    assert va.flag_table() is None
    calls = []
    real = va._vllm_parser
    monkeypatch.setattr(va, "_vllm_parser", lambda: calls.append(1) or real())
    assert va.parse_serve_line([LLAMA, "-tp", "4"]).tensor_parallel_size == 4
    assert calls and va.flag_table() is not None
    calls.clear()
    assert va.parse_serve_line([LLAMA, "-tp", "8"]).tensor_parallel_size == 8
    assert not calls  # read through the table


def test_rewriting_features_go_to_vllms_own_parser(table_dir, monkeypatch):
    import attnplan.vllm.args as va

    va.parse_serve_line([LLAMA])  # builds the table
    calls = []
    real = va._vllm_parser
    monkeypatch.setattr(va, "_vllm_parser", lambda: calls.append(1) or real())
    line = va.parse_serve_line([LLAMA, "--speculative-config.method", "ngram",
                                "--speculative-config.num_speculative_tokens", "3",
                                "--speculative-config.prompt_lookup_max", "3", "--tensor_parallel_size", "2"])
    assert calls and line.speculative["num_speculative_tokens"] == 3 and line.tensor_parallel_size == 2


@pytest.mark.parametrize("flag", ["-tp", "-pp", "-dcp"])
def test_zero_parallel_sizes_are_refused_naming_the_flag(flag, capsys):
    rc = main(["vllm", "serve", LLAMA, "--device", "B200", flag, "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "must be at least 1, got 0" in err

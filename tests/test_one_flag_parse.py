"""One request, one parse (issue 36 items 5-6): ``plan``/``explain --model-config X [flags]``, ``preflight
--model-config X [flags]`` and a ``--configs`` entry build the same ``ModelRequest`` from the same flags
(attnplan/request.py ``request_from_fields``). The engine command's flags land on the request's own fields and are read
as the engine reads them: ``--kv-cache-dtype`` in vLLM 0.33's CacheDType spelling (SGLang 0.5.23's under
``--engine sglang``), a spelling the engine refuses is exit 2 with the engine's message on every command; the
attention fields in attnplan's vocabulary (``--sliding-window``, ``--head-dim``, ...) ride as ``overrides``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnplan.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "examples" / "llama-3.1-8b.json")


@pytest.fixture
def seen(planned_requests):
    """The requests ``plan_request`` plans (tests/conftest.py: preflight's simulated nodes and plan import it
    from attnplan/request.py)."""
    return planned_requests


def _request(seen, capsys, argv: list[str]):
    seen.clear()
    rc = main(argv)
    capsys.readouterr()
    return rc, seen[-1]


FLAGS = [
    ["--kv-cache-dtype", "fp8"],
    ["--kv-cache-dtype", "bfloat16", "--block-size", "32"],
    ["--kv-cache-dtype", "fp8_e4m3", "--tensor-parallel-size", "2", "--sliding-window", "1024"],
    ["--attention-backend", "FLASH_ATTN", "--num-speculative-tokens", "2"],
    ["--engine", "sglang", "--kv-cache-dtype", "bf16"],
    ["--engine", "sglang", "--kv-cache-dtype", "fp8_e4m3"],   # kept in SGLang's spelling (request.py cache_dtype)
]


@pytest.mark.parametrize("flags", FLAGS, ids=["fp8", "bfloat16-block32", "fp8e4m3-tp2-window", "flash-attn-spec",
                                              "sglang-bf16", "sglang-fp8e4m3"])
def test_plan_and_preflight_build_one_request(seen, capsys, flags):
    rc_plan, by_plan = _request(seen, capsys, ["plan", "--model-config", LLAMA, "--device", "H100", *flags, "--json"])
    rc_pre, by_preflight = _request(seen, capsys, ["preflight", "--simulate", "H100=1", "--model-config", LLAMA, *flags])
    # preflight carries the model as its config.json (each node needs no copy); everything else is one request
    assert by_plan.model_dump(exclude={"model"}) == by_preflight.model_dump(exclude={"model"})
    assert rc_plan == rc_pre
    kv = flags[flags.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in flags else "auto"
    assert by_plan.kv_cache_dtype == kv and "kv_cache_dtype" not in by_plan.overrides
    if "--sliding-window" in flags:   # attnplan's own attention fields: overrides over every layer group
        assert by_plan.overrides == {"sliding_window": 1024}


@pytest.mark.parametrize("kv", ["bf16", "half", "fp4", "fp8_e4m3fn"])
def test_a_spelling_vllm_refuses_is_exit_2_with_vllm_s_message_on_every_command(capsys, tmp_path, kv):
    configs = tmp_path / "configs.yaml"
    configs.write_text(f"- {{name: llama, model_config: {LLAMA}, kv_cache_dtype: {kv}}}\n")
    errors = []
    for argv in (["plan", "--model-config", LLAMA, "--device", "H100", "--kv-cache-dtype", kv],
                 ["explain", "--model-config", LLAMA, "--device", "H100", "--kv-cache-dtype", kv],
                 ["preflight", "--simulate", "H100=1", "--model-config", LLAMA, "--kv-cache-dtype", kv],
                 ["preflight", "--simulate", "H100=1", "--configs", str(configs)],
                 ["vllm", "serve", LLAMA, "--kv-cache-dtype", kv, "--device", "H100"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "vLLM 0.33 refuses this --kv-cache-dtype at startup" in err, err
        errors.append(err.partition("kv_cache_dtype: ")[2])
    assert len(set(errors)) == 1   # one parse: one message, whichever command read the flag


def test_sglang_spelling_under_sglang(capsys):
    # under --engine sglang the spelling is SGLang's: bf16 is its own, mxfp8 it names and refuses (not modelled)
    assert main(["plan", "--model-config", LLAMA, "--device", "H100", "--engine", "sglang", "--kv-cache-dtype",
                 "bf16"]) == 0
    capsys.readouterr()
    for argv in (["plan", "--model-config", LLAMA, "--device", "H100"],
                 ["preflight", "--simulate", "H100=1", "--model-config", LLAMA]):
        assert main([*argv, "--engine", "sglang", "--kv-cache-dtype", "mxfp8"]) == 2
        assert "kv_cache_dtype: --kv-cache-dtype mxfp8 runs no FlashInfer kernel" in capsys.readouterr().err

"""attnplan/kernels/trtllm_gen/wrappers.py held to FlashInfer's own Python wrappers (the installed
flashinfer, 0.7.2.post1): a seeded sample of attnplan/oracle/trtllm_wrappers.py, which calls the real
entry points on the CPU with only the module loading and the device queries stubbed.

The full figure is ``python -m attnplan.oracle.trtllm_wrappers --configs 13000 --seed 0`` (10,406 compared);
``--flashinfer-path DIR`` runs another release's wrappers (0.6.13, 0.6.18.post1, 0.7.0.post1, 0.7.1: each
10,406/10,406). FLASHINFER_0613_PYTHON=DIR runs a 0.6.13 sample here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("flashinfer")

from attnplan.kernels.trtllm_gen.phase import MLA_DECODE  # noqa: E402
from attnplan.kernels.trtllm_gen.wrappers import wrapper_error  # noqa: E402
from attnplan.oracle import trtllm_wrappers as ow  # noqa: E402


def test_the_installed_wrappers_agree_with_the_port_on_a_seeded_sample():
    agree, total, bad = ow.compare(1500, seed=20261126)
    assert total > 1000
    assert not bad, "\n".join(f"{c}: flashinfer {fi!r}, attnplan {ours!r}" for c, fi, ours in bad[:5])
    assert agree == total


def test_the_oracle_sees_both_answers_and_a_refusal_names_its_message():
    bf16 = ow.Config(MLA_DECODE, "bf16", "bf16", "bf16", 576, 512, 32, 1, 64, 1, -1, False)
    page16 = ow.Config(MLA_DECODE, "bf16", "bf16", "bf16", 576, 512, 32, 1, 16, 1, -1, False)
    with ow.stubbed():
        assert ow.flashinfer_answer(bf16) is None                       # reaches the (stubbed) kernel
        assert "block_size in (32, 64)" in ow.flashinfer_answer(page16)   # refused by the wrapper
    assert ow.attnplan_answer(bf16) is None and "block_size" in ow.attnplan_answer(page16)


def test_mla_wrapper_checks_follow_the_release():
    # 0.6.13's wrapper has neither the page nor the head-count check, nor the rope-less shape
    assert wrapper_error(MLA_DECODE, "BF16", "BF16", 576, 512, page_size=16, num_heads_q=96, code="0.6.13") is None
    assert "Unsupported MLA dimensions" in wrapper_error(MLA_DECODE, "BF16", "BF16", 512, 512, code="0.6.13")
    assert "64 < num_heads_q < 128" in wrapper_error(MLA_DECODE, "BF16", "BF16", 576, 512, page_size=64,
                                                     num_heads_q=96, code="0.6.18")
    # the packed (NVFP4) latent cache is refused from 0.7.0 on
    assert wrapper_error(MLA_DECODE, "E4M3", "BF16", 576, 512, dtype_kv="E2M1", page_size=64, code="0.6.18") is None
    assert "packed uint8" in wrapper_error(MLA_DECODE, "E4M3", "BF16", 576, 512, dtype_kv="E2M1", page_size=64,
                                           code="0.7.0")


@pytest.mark.skipif(not os.environ.get("FLASHINFER_0613_PYTHON"),
                    reason="FLASHINFER_0613_PYTHON (an unzipped flashinfer-python 0.6.13 wheel) not set")
def test_flashinfer_0613_wrappers_agree_with_the_port():
    # another release's flashinfer cannot share this process with the installed one: a subprocess
    r = subprocess.run([sys.executable, "-m", "attnplan.oracle.trtllm_wrappers", "--configs", "800", "--seed", "3",
                        "--flashinfer-path", os.environ["FLASHINFER_0613_PYTHON"]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flashinfer 0.6.13 wrappers" in r.stdout and "(code 0.6.13)" in r.stdout

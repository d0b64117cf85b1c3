"""The trtllm-gen selection port held to FlashInfer's own code (attnplan/oracle/trtllm_gen.py).

FlashInfer's fmhaKernels.cuh / fmhaRunner.cuh (from the installed flashinfer-python, and from 0.6.13's wheel
when FLASHINFER_0613_INCLUDE points at its flashinfer/data/include) are compiled with g++ over the shipped
table, and a seeded sample of configurations must get the same answer from both, line for line: the kernel
run() launches, the launcher's "Missing TRTLLM-GEN kernel" parameters, or FlashInfer's own error.
The full figure (100,000 configurations per code) is ``python -m attnplan.oracle.trtllm_gen --configs 100000``.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from attnplan.kernels.trtllm_gen.table import shipped
from attnplan.oracle import trtllm_gen as oracle

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _check(include: Path, version: str, tmp_path_factory, n: int = 3000, seed: int = 20261125):
    table = shipped()
    binary = oracle.build(include, table, tmp_path_factory.mktemp("trtllm-oracle"))
    queries = oracle.generate(n, seed)
    agree, diffs, truth = oracle.compare(binary, queries, table, version)
    assert not diffs, "\n".join(f"{q}\n  flashinfer: {t}\n  attnplan:   {g}" for q, t, g in diffs[:5])
    kinds = Counter(t.split(" ", 1)[0] for t in truth)
    # the sample exercises all three answers, not just refusals
    assert kinds["OK"] > n // 20 and kinds["MISS"] > n // 20 and kinds["ERR"] > 0
    return truth


def test_installed_flashinfer_selection_code_agrees_with_the_port(tmp_path_factory):
    include = oracle.installed_include()
    version = oracle.code_version(include)
    truth = _check(include, version, tmp_path_factory)
    # 0.7.x code: SM 10.7 is a supported architecture (its runner accepts kSM_107)
    if version.startswith("0.7"):
        assert not any("Unsupported architecture" in t for t in truth)


# make setup unpacks 0.6.13's headers here (scripts/trtllm_release_headers.sh); FLASHINFER_0613_INCLUDE overrides.
INCLUDE_0613 = Path(os.environ.get("FLASHINFER_0613_INCLUDE")
                    or Path(__file__).resolve().parents[1] / ".venv/releases/flashinfer-0.6.13/flashinfer/data/include")


@pytest.mark.skipif(not INCLUDE_0613.is_dir(), reason="flashinfer 0.6.13's headers not unpacked (make setup)")
def test_flashinfer_0613_selection_code_agrees_with_the_port(tmp_path_factory):
    include = INCLUDE_0613
    truth = _check(include, "0.6.13", tmp_path_factory)
    assert any("Unsupported architecture" in t for t in truth)   # 0.6.13's runner: SM 100/103 only


def test_a_changed_table_is_seen_by_both_sides(tmp_path_factory):
    """The harness reads the table it is given (not a copy of FlashInfer's): dropping the kernel a query
    selects turns both answers into the same miss."""
    from dataclasses import replace

    from attnplan.kernels.trtllm_gen import select as sel

    table = shipped()
    q = oracle.Query(mode=1, sm=100, dtype_q="BF16", dtype_kv="BF16", dtype_o="BF16", head_dim_qk=128,
                     head_dim_v=128, page_size=16, num_heads_q=32, num_heads_kv=8, batch=8, max_q_len=1,
                     max_kv_len=100, sm_count=148)
    first = sel.oracle_line(q, table, "0.7.2.post1")
    assert first.startswith("OK ")
    smaller = replace(table, rows=tuple(r for r in table.rows if r["mFuncName"] != first[3:]), _index={})
    binary = oracle.build(oracle.installed_include(), smaller, tmp_path_factory.mktemp("trtllm-oracle-small"))
    version = oracle.code_version(oracle.installed_include())
    truth = oracle.run_oracle(binary, [q])[0]
    assert truth == sel.oracle_line(q, smaller, version) and not truth.startswith("OK " + first[3:])

"""The trtllm-gen selection per FlashInfer release (issue 42 item 2), held to each release's own headers.

select.py runs one selection code per release family whose headers differ (``CODES``: 0.6.13, 0.6.18, 0.7.0,
0.7.1 = 0.7.1/0.7.2, 0.7.2.post1); phase.code_for maps the versions the engines pin to them. Where a release's
headers are on disk (scripts/trtllm_release_headers.sh VER .venv/releases/flashinfer-VER, or
$FLASHINFER_RELEASE_HEADERS/VER), FlashInfer's own fmhaKernels.cuh / fmhaRunner.cuh of that release are compiled
with g++ (attnplan/oracle/trtllm_gen.py) and a seeded sample plus one configuration per switch must get the
same answer from the port, and the neighbouring release's code must answer that switch's configuration
differently (so each switch is needed, not just allowed). The full figure is 100,000 configurations per
release: ``python -m attnplan.oracle.trtllm_gen --release VER --include DIR --configs 100000``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from attnplan.kernels.trtllm_gen import phase as tg
from attnplan.kernels.trtllm_gen import select as sel
from attnplan.kernels.trtllm_gen.table import shipped
from attnplan.oracle import trtllm_gen as oracle

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("0.6.13", "0.6.18", "0.7.0.post1", "0.7.1", "0.7.2")


def headers(release: str):
    """The release's flashinfer/data/include, or None when it is not on disk."""
    cands = []
    if os.environ.get("FLASHINFER_RELEASE_HEADERS"):
        cands.append(Path(os.environ["FLASHINFER_RELEASE_HEADERS"]) / release)
    if release == "0.6.13" and os.environ.get("FLASHINFER_0613_INCLUDE"):
        cands.append(Path(os.environ["FLASHINFER_0613_INCLUDE"]))
    cands.append(ROOT / ".venv" / "releases" / f"flashinfer-{release}")
    for c in cands:
        try:
            return oracle.resolve_include(c)
        except Exception:
            continue
    return None


def _q(**kw) -> oracle.Query:
    base = dict(mode=1, sm=100, dtype_q="BF16", dtype_kv="BF16", dtype_o="BF16", head_dim_qk=128, head_dim_v=128,
                page_size=16, num_heads_q=8, num_heads_kv=1, batch=4, max_q_len=1, max_kv_len=32768, sm_count=160)
    base.update(kw)
    return oracle.Query(**base)


# One configuration per switch, with the two codes it tells apart (found by the oracle: each differs there).
SWITCHES = {
    # 0.7.2.post1 computeCtaAndClusterConfig: >16 KV splits clamped to 16, so the CGA-reduction kernel
    "cga_clamp": (_q(dtype_q="FP16", dtype_kv="FP16", dtype_o="FP16", head_dim_qk=256, head_dim_v=256),
                  "0.7.1", "0.7.2.post1"),
    # 0.7.1 getPaddedMlaTileSizeQ: a 4-head sparse MLA group padded to the Q8 tile (0.7.0: tile 4)
    "pads_small_mla_groups": (_q(sm=103, dtype_q="E4M3", dtype_kv="E2M1", dtype_o="BF16", head_dim_qk=512,
                                 head_dim_v=512, page_size=512, num_heads_q=4, batch=16, max_kv_len=16,
                                 sm_count=132, sparse_top_k=128), "0.7.0", "0.7.1"),
    # 0.7.0 selectSparseMlaGenerationKernel: no half tile for 17 query tokens (0.6.18: halved at batch 1)
    "sparse_half_tile_short_q": (_q(dtype_q="E4M3", dtype_kv="E4M3", head_dim_qk=512, head_dim_v=512,
                                    page_size=256, num_heads_q=16, batch=1, max_q_len=17, max_kv_len=1, sm_count=20,
                                    window_left=4095, causal=False, sparse_top_k=2048), "0.6.18", "0.7.0"),
    # 0.7.0 computeCtaAndClusterConfig useMlaH512Cga: DeepSeek MLA one-token decode at batch 1 on the split-V
    # CGA kernel (0.6.18: GmemReduction)
    "mla_h512_cga": (_q(head_dim_qk=576, head_dim_v=512, page_size=32, num_heads_q=16, batch=1, max_kv_len=8192,
                        sm_count=148), "0.6.18", "0.7.0"),
    # 0.7.0 hashFromRunnerParams: the DSv4 fields in the missing kernel's parameters
    "dsv4": (_q(head_dim_qk=96, head_dim_v=96, page_size=16, num_heads_q=5), "0.6.18", "0.7.0"),
}

CODE_OF_RELEASE = {"0.6.13": "0.6.13", "0.6.18": "0.6.18", "0.7.0.post1": "0.7.0", "0.7.1": "0.7.1", "0.7.2": "0.7.1"}


def test_the_engines_pins_map_to_their_own_selection_code():
    # backends.yaml engines' pins (issue 42): SGLang 0.5.21 -> 0.6.18, vLLM 0.31/0.32 -> 0.7.0.post1,
    # SGLang 0.5.22 -> 0.7.1, SGLang 0.5.23 -> 0.7.2, vLLM 0.33 -> 0.7.2.post1
    want = {"0.6.12": "0.6.13", "0.6.17": "0.6.13", "0.6.18": "0.6.18", "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0", "0.7.0.post1": "0.7.0", "0.7.1": "0.7.1", "0.7.2": "0.7.1",
            "0.7.2.post1": "0.7.2.post1", "0.7.2.post1+cu130": "0.7.2.post1"}
    for version, code in want.items():
        got = tg.code_for(version)
        assert got is not None and got[0] == code, version
        assert got[2] == tg.PIN_0_6   # the only public table: 2d6a5a02 is read from a node
    # a release whose headers were not compared has no code (fail closed: not decided here)
    for version in ("0.6.11", "0.6.19", "0.7.2.post2", "0.7.3", "0.8.0", "0.7.2rc1", "nonsense", ""):
        assert tg.code_for(version) is None, version
    assert sel.resolve("0.6").name == "0.6.13" and sel.resolve("0.7").name == "0.7.2.post1"
    with pytest.raises(ValueError):
        sel.resolve("0.7.3")


def test_each_switch_changes_the_answer_between_the_releases_it_separates():
    table = shipped()
    for name, (q, before, after) in SWITCHES.items():
        assert getattr(sel.CODES[after], name) and not getattr(sel.CODES[before], name), name
        a, b = sel.oracle_line(q, table, before), sel.oracle_line(q, table, after)
        assert a != b, name
    q, _, _ = SWITCHES["cga_clamp"]
    assert "Cga" in sel.oracle_line(q, table, "0.7.2.post1") and "Cga" not in sel.oracle_line(q, table, "0.7.2")
    q, _, _ = SWITCHES["mla_h512_cga"]
    assert "HVPerCta128PagedKvDenseP32MultiCtasKvCga" in sel.oracle_line(q, table, "0.7.0")
    assert "MultiCtasKvCga" not in sel.oracle_line(q, table, "0.6.18")
    q, _, _ = SWITCHES["pads_small_mla_groups"]
    assert "tileSizeQ=4," in sel.oracle_line(q, table, "0.7.0") and "tileSizeQ=8," in sel.oracle_line(q, table, "0.7.1")
    q, _, _ = SWITCHES["dsv4"]
    assert "fusesDsv4InvRopeFp8Quant" in sel.oracle_line(q, table, "0.7.0.post1")
    assert "fusesDsv4InvRopeFp8Quant" not in sel.oracle_line(q, table, "0.6.18")


def test_decisions_name_the_release_code_that_decided():
    c = tg.phase_call(tg.DECODE, query_dtype="bf16", kv_dtype="bf16", out_dtype="bf16", head_dim_qk=128,
                      head_dim_vo=128, num_qo_heads=32, num_kv_heads=8)
    for version, label in (("0.6.18", "flashinfer 0.6.18"), ("0.7.0.post1", "flashinfer 0.7.0.post1"),
                           ("0.7.2", "flashinfer 0.7.1"), ("0.7.2.post1", "flashinfer 0.7.2.post1")):
        d = tg.decide(c, 100, 16, version)
        assert d is not None and d.ok and d.code == label and d.table.startswith("158f6fa1"), version
    assert tg.decide(c, 100, 16, "0.7.3") is None


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@pytest.mark.parametrize("release", RELEASES)
def test_release_headers_agree_with_the_port(release, tmp_path_factory):
    include = headers(release)
    if include is None:
        pytest.skip(f"flashinfer {release}'s headers are not on disk (scripts/trtllm_release_headers.sh {release} "
                    f".venv/releases/flashinfer-{release})")
    assert oracle.code_version(include) == release
    code = CODE_OF_RELEASE[release]
    table = shipped()
    binary = oracle.build(include, table, tmp_path_factory.mktemp(f"trtllm-oracle-{release}"))
    queries = oracle.generate(3000, 20261126)
    targeted = [q for q, before, after in SWITCHES.values() if code in (before, after)]
    truth = oracle.run_oracle(binary, queries + targeted)
    diffs = [(q, t, g) for q, t in zip(queries + targeted, truth) if (g := sel.oracle_line(q, table, release)) != t]
    assert not diffs, "\n".join(f"{q}\n  flashinfer: {t}\n  attnplan:   {g}" for q, t, g in diffs[:5])
    kinds = Counter(t.split(" ", 1)[0] for t in truth)
    assert kinds["OK"] > 150 and kinds["MISS"] > 150 and kinds["ERR"] > 0
    assert sum(1 for q in queries if q.sparse_top_k) > 100   # sparse MLA decode is in the sample
    # the switch is needed: the neighbouring release's code answers its configuration otherwise
    for (q, before, after), t in zip([s for s in SWITCHES.values() if code in s[1:]], truth[len(queries):]):
        other = after if code == before else before
        assert sel.oracle_line(q, table, other) != t, (release, other)
    if release == "0.6.13":
        assert any("Unsupported architecture" in t for t in truth)   # SM 100/103 only
    else:
        assert not any("Unsupported architecture" in t for t in truth)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_cli_takes_a_release_and_its_headers_and_refuses_a_mismatch(capsys):
    include = headers("0.7.1")
    if include is None:
        pytest.skip("flashinfer 0.7.1's headers are not on disk (scripts/trtllm_release_headers.sh)")
    root = include.parent.parent.parent   # the directory the wheel was unzipped into is accepted too
    assert oracle.main(["--release", "0.7.2", "--include", str(root), "--configs", "300", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"flashinfer 0\.7\.2 selection code \(port: 0\.7\.1\) .*: 300/300 agree", out)
    with pytest.raises(SystemExit):   # 0.7.1's headers are not 0.7.2.post1's code
        oracle.main(["--release", "0.7.2.post1", "--include", str(include), "--configs", "10"])
    assert "not 0.7.2.post1's" in capsys.readouterr().err

"""The node's own trtllm-gen kernel table, found where FlashInfer looks (kernels/trtllm_gen/node.py,
node/probe.py probe_trtllm_table), and ``attnplan cubins`` (cli/cubins.py)."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest

from attnplan.kernels.trtllm_gen import node as tgnode
from attnplan.kernels.trtllm_gen import phase as tg
from attnplan.kernels.trtllm_gen.table import PIN_0_6, TableError, shipped
from attnplan.oracle.trtllm_gen import meta_info_header
from attnplan.node.probe import ProbeIO, probe_trtllm_table

T = shipped()


def _stage(root: Path, rows=None, corrupt_header=False, foreign_checksums=False) -> Path:
    """A cubin directory as FlashInfer lays it out: <pin>/fmha/trtllm-gen/{checksums.txt, include/...}."""
    from dataclasses import replace

    table = T if rows is None else replace(T, rows=tuple(rows))
    d = root / PIN_0_6 / "fmha" / "trtllm-gen"
    (d / "include").mkdir(parents=True)
    header = meta_info_header(table).encode()
    (d / "include" / "flashInferMetaInfo.h").write_bytes(header[: len(header) // 2] if corrupt_header else header)
    lines = [f"{hashlib.sha256(header).hexdigest()}  include/flashInferMetaInfo.h"]
    lines += [f"{r['sha256']}  {r['mFuncName']}.cubin" for r in table.rows]
    if foreign_checksums:
        lines.append("0" * 64 + "  extra.cubin")
    sums = ("\n".join(lines) + "\n").encode()
    (d / "checksums.txt").write_bytes(sums)
    return d, hashlib.sha256(sums).hexdigest()


def _io(env, cubin_version=None):
    return ProbeIO(env=env, package_version=lambda name: {"flashinfer-python": "0.6.13",
                                                         "flashinfer-cubin": cubin_version}.get(name))


def test_node_table_from_flashinfer_cubin_dir_decides_the_kernels(tmp_path):
    rows = [r for r in T.rows if r["mDataTypeQ"] == "BF16" and r["mDataTypeO"] == "BF16"]
    d, digest = _stage(tmp_path, rows)
    nt = probe_trtllm_table(_io({"FLASHINFER_CUBIN_DIR": str(tmp_path)}), flashinfer_version="0.6.13",
                            pin=(PIN_0_6, digest))
    assert nt.table is not None and len(nt.table.rows) == len(rows)
    assert nt.location.origin == "FLASHINFER_CUBIN_DIR"
    call = tg.phase_call(tg.DECODE, query_dtype="bf16", kv_dtype="bf16", out_dtype="bf16",
                         head_dim_qk=128, head_dim_vo=128, num_qo_heads=32, num_kv_heads=8)
    d1 = tg.decide(call, 100, 16, "0.6.13", nt.table)
    assert d1.ok and "the node's" in d1.table
    # the node's table lacks fp8 kernels: fp8 is missing there although the shipped table has it
    fp8 = tg.phase_call(tg.DECODE, query_dtype="fp8_e4m3", kv_dtype="fp8_e4m3", out_dtype="bf16",
                        head_dim_qk=128, head_dim_vo=128, num_qo_heads=32, num_kv_heads=8)
    assert not tg.decide(fp8, 100, 16, "0.6.13", nt.table).ok and tg.decide(fp8, 100, 16, "0.6.13").ok
    # cubins: none staged yet, one staged
    assert nt.on_disk(d1.cubin) is False
    (d / d1.cubin).write_bytes(b"x")
    assert nt.on_disk(d1.cubin) is True


def test_truncated_header_and_foreign_checksums_are_errors_naming_the_file(tmp_path):
    _, digest = _stage(tmp_path / "a", T.rows[:50], corrupt_header=True)
    with pytest.raises(TableError, match="flashInferMetaInfo.h"):
        probe_trtllm_table(_io({"FLASHINFER_CUBIN_DIR": str(tmp_path / "a")}), flashinfer_version="0.6.13",
                           pin=(PIN_0_6, digest))
    _stage(tmp_path / "b", T.rows[:50], foreign_checksums=True)
    # FlashInfer 0.6.13's CheckSumHash is the real checksums.txt's: this one is another artifact's
    with pytest.raises(TableError, match="checksums.txt.*CheckSumHash"):
        probe_trtllm_table(_io({"FLASHINFER_CUBIN_DIR": str(tmp_path / "b")}), flashinfer_version="0.6.13")


def test_absent_table_is_not_ready_and_a_mismatched_cubin_wheel_is_ignored_as_flashinfer_says(tmp_path):
    loc = tgnode.locate({"FLASHINFER_WORKSPACE_BASE": str(tmp_path)}, "0.6.13", "0.6.12", str(tmp_path / "pkg"))
    assert loc.cubin_dir == str(tmp_path / ".cache" / "flashinfer" / "cubins")
    assert "Ignoring incompatible flashinfer-cubin package" in loc.notes[0]
    nt = tgnode.load(loc)
    assert nt.table is None and "not on disk" in nt.why
    same = tgnode.locate({}, "0.6.13", "0.6.13", str(tmp_path / "pkg"))
    assert same.cubin_dir == str(tmp_path / "pkg") and same.origin == "flashinfer-cubin 0.6.13"


def test_artifact_pin_is_read_from_flashinfer_source():
    src = ('class ArtifactPath:\n    TRTLLM_GEN_FMHA: str = "158f6fa11ef139a098cfddcdddce73ca99d164ad/fmha/trtllm-gen/"\n'
           'class CheckSumHash:\n    TRTLLM_GEN_FMHA: str = (\n        "' + "c" * 64 + '"\n    )\n')
    assert tgnode.artifact_pin(src) == (PIN_0_6, "c" * 64)
    assert tgnode.known_pin("0.6.15")[0] == PIN_0_6 and tgnode.known_pin("0.6.11") is None


def _cli(argv):
    from attnplan.cli import cubins

    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers()
    cubins.add_parser(sub)
    args = ap.parse_args(["cubins", *argv])
    return args.run(args)


def test_cubins_cli_lists_each_phase_cubin_with_sha256(capsys):
    rc = _cli(["--device", "B200", "--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8",
               "--engine", "flashinfer", "--attention-backend", "trtllm-gen", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and {p["phase"] for p in doc["phases"]} == {"prefill", "decode"}
    sha = {r["mFuncName"] + ".cubin": r["sha256"] for r in T.rows}
    for p in doc["phases"]:
        assert p["cubins"] and all(c["sha256"] == sha[c["file"]] for c in p["cubins"])
    assert set(doc["prestage"]) == {c["file"] for p in doc["phases"] for c in p["cubins"]}


# -- the node's own table decides the plan (issue 37) ----------------------------------------------------------
def _probed(tmp_path, monkeypatch, rows=None, corrupt=False):
    from attnplan.node.probe import probe_node

    _d, digest = _stage(tmp_path, rows, corrupt_header=corrupt)
    monkeypatch.setitem(tgnode.KNOWN_PINS, "0.6", (PIN_0_6, digest))   # FlashInfer's CheckSumHash for this staged table
    gpu = {"count": 1, "name": "NVIDIA B200", "capability": 100, "memory_gib": 180, "driver": "580.0",
           "mig": False}
    io = ProbeIO(nvml=lambda: gpu, env={"FLASHINFER_CUBIN_DIR": str(tmp_path), "CUDA_HOME": "/usr/local/cuda"},
                 package_version=lambda name: {"flashinfer-python": "0.6.13"}.get(name),
                 http_reachable=lambda url, t: (True, "HTTP 200"), hostname=lambda: "b200-0",
                 torch_cuda=lambda: None, which=lambda p: p if p.endswith("bin/nvcc") else None,
                 default_cubin_dir=None)
    return probe_node(io)


FP8 = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, dtype="bf16", kv_cache_dtype="fp8", page_size=16)


def test_the_nodes_table_decides_its_plans(tmp_path, monkeypatch):
    from attnplan.policy import plan_for, simulated_node

    rows = [r for r in T.rows if r["mDataTypeKv"] == "BF16"]          # a node table without fp8-KV kernels
    node = _probed(tmp_path, monkeypatch, rows)
    own = node.trtllm_kernel_table.value
    assert own["pin"] == PIN_0_6 and own["origin"] == "FLASHINFER_CUBIN_DIR"
    a = plan_for(FP8, node, engine="flashinfer")
    assert "trtllm.kernel-missing" in {v.rule for v in a.violations} or \
        a.backends() != ("trtllm-gen", "trtllm-gen")
    # the same config on a node without its own table is decided by the shipped table, which has fp8 kernels
    ref = plan_for(FP8, simulated_node("B200", flashinfer_version="0.6.13"), engine="flashinfer")
    assert ref.ok and ref.backends()[1] == "trtllm-gen"
    bf16 = plan_for({**FP8, "kv_cache_dtype": "auto"}, node, engine="flashinfer")
    assert bf16.ok and bf16.backends()[1] == "trtllm-gen"
    assert "the node's" in bf16.plan.decode.kernel_table


def test_a_corrupt_node_table_is_named_and_downloaded_again_only_where_it_can_be(tmp_path, monkeypatch):
    """A table on disk that is not FlashInfer's is an error naming the file; FlashInfer loads checksums.txt only at
    its CheckSumHash and downloads its pin's table again (jit/cubin_loader.py get_artifact): with the artifactory
    answering the plan is decided by that table, without it the node is not ready (trtllm.kernel-missing)."""
    from attnplan.policy import Fact, plan_for

    node = _probed(tmp_path, monkeypatch, corrupt=True)
    err = node.trtllm_kernel_table.value["error"]
    assert "flashInferMetaInfo.h" in err
    cfg = {**FP8, "kv_cache_dtype": "auto", "attention_backend": "trtllm-gen"}
    online = plan_for(cfg, node.with_fact(artifactory_reachable=Fact.measured(True)), engine="flashinfer")
    assert online.ok and "downloaded again" in online.plan.decode.kernel_table
    offline = plan_for(cfg, node.with_fact(artifactory_reachable=Fact.measured(False), cubin_dir_has_cubins=Fact.measured(True)),
                       engine="flashinfer")
    assert not offline.ok
    assert any("not FlashInfer's" in v.message and "flashInferMetaInfo.h" in v.message
               for v in offline.violations if v.rule == "trtllm.kernel-missing")

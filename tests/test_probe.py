"""The local probe with injected edges (no real NVML), the real HTTP check on localhost, caching,
NodeFacts JSON, and that importing the policy engine pulls in neither torch nor flashinfer."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import attnplan
import attnplan.node.probe as node_probe
from attnplan import policy
from attnplan.render import finish
from attnplan.policy import AttentionConfig, Fact, NodeFacts, Source
from attnplan.node import NodeCache, ProbeIO, probe_node
from attnplan.policy.answer import node_json
from attnplan.node.probe import DEFAULT_ARTIFACTORY, http_reachable, needs_artifactory_check

REPO = Path(__file__).resolve().parents[1]
CFG = AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8)
GPU = {
    100: {"count": 8, "name": "NVIDIA B200", "capability": 100, "memory_gib": 179.1, "driver": "580.65.06", "mig": False},
    103: {"count": 8, "name": "NVIDIA B300", "capability": 103, "memory_gib": 268.0, "driver": "580.65.06", "mig": False},
    90: {"count": 8, "name": "NVIDIA H100 80GB HBM3", "capability": 90, "memory_gib": 79.6, "driver": "550.54", "mig": False},
}
PKGS = {"torch": "2.9.0+cu128", "flashinfer-python": "0.7.2.post1"}


class Http:
    """A recording stand-in for http_reachable."""

    def __init__(self, ok: bool = True):
        self.ok = ok
        self.calls: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout: float):
        self.calls.append((url, timeout))
        return self.ok, "HTTP 200" if self.ok else "unreachable: refused"


# trtllm-gen's cubins are launched by a JIT-built module (jit.toolchain, issue 22): the tests that
# expect a trtllm-gen plan on 10.x give the node an nvcc.
NVCC = lambda p: p if p.endswith("bin/nvcc") else None  # noqa: E731

def make_io(gpu=None, *, env=None, pkgs=None, http=None, nvml_error: Exception | None = None, **kw) -> ProbeIO:
    def nvml():
        if nvml_error is not None:
            raise nvml_error
        return dict(gpu) if gpu is not None else {"count": 0}

    packages = PKGS if pkgs is None else pkgs
    # This machine's torch, nvcc and ~/.cache stay out of the tests unless a test brings its own.
    kw.setdefault("torch_cuda", lambda: None)
    kw.setdefault("which", lambda name: None)
    kw.setdefault("default_cubin_dir", None)
    return ProbeIO(nvml=nvml, package_version=lambda d: packages.get(d), env=dict(env or {}),
                   http_reachable=http or Http(), hostname=lambda: "node-1", **kw)


# -- no driver / no GPU ------------------------------------------------------------------
@pytest.mark.parametrize("error", [RuntimeError("NVML Shared Library Not Found"),
                                   ImportError("No module named 'pynvml'"), OSError("libnvidia-ml.so.1: cannot open")])
def test_no_driver_facts_unknown_with_reason(error):
    http = Http()
    node = probe_node(make_io(nvml_error=error, http=http))      # never raises
    for name in ("gpu_name", "capability", "gpu_count", "driver_version"):
        f = getattr(node, name)
        assert f.source == Source.unknown and f.value is None
        assert f.detail and str(error) in f.detail
    assert http.calls == []                                     # nothing to plan trtllm-gen for
    assert node.artifactory_reachable.value is None
    a = policy.plan_for(CFG, node)
    assert a.status == "rejected"
    assert any(v.rule == "device.cuda" and v.phase == "both" for v in a.violations)
    with pytest.raises(policy.UnsupportedConfigurationError):
        policy.require_plan(CFG, node)


def test_zero_gpus():
    node = probe_node(make_io(None))
    assert node.gpu_count.value == 0 and node.gpu_count.source == Source.measured
    assert node.capability.value is None and node.capability.source == Source.unknown
    a = policy.plan_for(CFG, node)
    assert a.status == "rejected" and "device.cuda" in {v.rule for v in a.violations}


def test_plan_for_without_node_uses_the_cached_local_probe(monkeypatch):
    calls = []

    def probe():
        calls.append(1)
        return probe_node(make_io(nvml_error=RuntimeError("no driver")))

    monkeypatch.setattr(node_probe, "LOCAL", NodeCache(probe))
    a = attnplan.plan_for(CFG)
    b = attnplan.plan_for(CFG)
    assert a.status == b.status == "rejected"
    assert "device.cuda" in {v.rule for v in a.violations}
    assert len(calls) == 1


def test_the_policy_plans_facts_and_probes_nothing(monkeypatch):
    # attnplan/policy reads no machine: without a node it says what it needs instead of probing.
    def probe():
        raise AssertionError("the policy probed the machine")

    monkeypatch.setattr(node_probe, "LOCAL", NodeCache(probe))
    with pytest.raises(policy.InvalidInputError, match="node"):
        policy.plan_for(CFG, None)
    with pytest.raises(policy.InvalidInputError, match="node"):
        policy.require_plan(CFG, None)


def test_hostname_failure_does_not_crash():
    def boom():
        raise OSError("no hostname")

    io = make_io(GPU[90])
    io.hostname = boom
    node = probe_node(io)
    assert node.hostname.source == Source.unknown and node.capability.value == 90


# -- devices, software versions ----------------------------------------------------------
def test_gpu_facts_measured():
    node = probe_node(make_io(GPU[103]))
    assert node.capability.value == 103 and node.capability_str == "10.3"
    assert node.capability.source == Source.measured
    assert node.gpu_name.value == "NVIDIA B300" and node.gpu_count.value == 8
    assert node.driver_version.value == "580.65.06"
    assert node.flashinfer_version.value == "0.7.2.post1"
    assert node.hostname.value == "node-1"


@pytest.mark.parametrize("version,cuda", [("2.9.0+cu128", "12.8"), ("2.11.0+cu130", "13.0"), ("2.6.0+cu124", "12.4"),
                                          ("2.5.1+cu118", "11.8"), ("2.5.1+cpu", None), ("2.6.0", None),
                                          ("2.4.0+rocm6.1", None)])
def test_torch_local_version_tag(version, cuda):
    node = probe_node(make_io(GPU[90], pkgs={"torch": version}))
    assert node.torch_version.value == version
    assert node.torch_cuda_version.value == cuda


def test_torch_not_installed():
    node = probe_node(make_io(GPU[90], pkgs={}))
    assert node.torch_version.value is None and node.torch_version.source == Source.unknown
    assert node.torch_cuda_version.value is None


def test_flashinfer_and_cubin_package_versions():
    node = probe_node(make_io(GPU[100], pkgs={"flashinfer-python": "0.7.2.post1", "flashinfer-cubin": "0.7.2.post1"}))
    assert node.flashinfer_version.value == "0.7.2.post1"
    assert node.flashinfer_cubin_version.value == "0.7.2.post1"
    node = probe_node(make_io(GPU[100], pkgs={"flashinfer-python": "0.7.2.post1"}))
    assert node.flashinfer_cubin_version.value is None


@pytest.mark.parametrize("cache, counts", [("0.7.2.post1", True), ("0.7.2.post1+cu130", True),
                                            ("0.7.0.post1", False), ("0.7.2.post10", False)])
def test_jit_cache_counts_only_at_flashinfers_version(cache, counts):
    # flashinfer/jit/env.py _check_jit_cache_version: the exact version or a +cuXXX local tag; any other is ignored
    node = probe_node(make_io(GPU[90], pkgs={"flashinfer-python": "0.7.2.post1", "flashinfer-jit-cache": cache}))
    assert node.flashinfer_jit_cache_version.value == cache
    assert node.jit_toolchain.value is counts
    if not counts:
        assert "does not match" in node.jit_toolchain.detail
    # nvcc builds the modules whatever the cache says
    assert probe_node(make_io(GPU[90], which=NVCC, env={"CUDA_HOME": "/usr/local/cuda"},
                              pkgs={"flashinfer-python": "0.7.2.post1", "flashinfer-jit-cache": cache})).jit_toolchain.value is True


@pytest.mark.parametrize("fi, cubin, raises", [("0.7.0.post1", "0.7.2.post1", True), ("0.7.2.post1", "0.7.0.post1", False),
                                               ("0.7.0.post1", "0.7.0.post1", False)])
def test_kernel_wheels_flashinfer_refuses_at_import(fi, cubin, raises):
    # flashinfer/jit/env.py: before 0.7.2 a mismatched flashinfer-cubin raises out of `import flashinfer`;
    # from 0.7.2 it is ignored (node/flashinfer_packages.py holds both)
    node = probe_node(make_io(GPU[90], which=NVCC, env={"CUDA_HOME": "/usr/local/cuda"},
                              pkgs={"flashinfer-python": fi, "flashinfer-cubin": cubin}))
    err = node.flashinfer_import_error.value
    assert (err is not None) == raises
    a = policy.plan_for(CFG, node, engine="flashinfer")
    assert ("flashinfer.kernel-wheels" in {v.rule for v in a.violations}) == raises
    if raises:
        assert "does not match" in err and cubin in err
        assert a.verdict.outcome == "fails-at-startup"


def test_installed_sglang_is_the_default_release():
    node = probe_node(make_io(GPU[90], pkgs={**PKGS, "sglang": "0.5.23"}))
    assert node.sglang_version.value == "0.5.23"
    assert policy.resolve_engine("sglang", node, policy.default_ruleset()).version == "0.5.23"
    old = probe_node(make_io(GPU[90], pkgs={**PKGS, "sglang": "0.4.0"}))
    with pytest.raises(policy.InvalidInputError, match="sglang 0.4.0 is installed on this node"):
        policy.resolve_engine("sglang", old, policy.default_ruleset())


# -- artifactory check -------------------------------------------------------------------
@pytest.mark.parametrize("cap", [100, 103])
def test_10x_gpu_checks_artifactory_auto(cap):
    http = Http(ok=True)
    node = probe_node(make_io(GPU[cap], http=http, which=NVCC), artifactory_timeout=0.5)
    assert http.calls == [(DEFAULT_ARTIFACTORY, 0.5)]
    assert node.artifactory_reachable.value is True
    assert node.artifactory_reachable.source == Source.measured
    assert node.artifactory_url.value == DEFAULT_ARTIFACTORY
    # with the artifactory reachable a 10.x node plans trtllm-gen without flashinfer-cubin
    assert policy.plan_for(CFG, node).backends() == ("trtllm-gen", "trtllm-gen")


def test_10x_gpu_artifactory_unreachable_plans_native():
    http = Http(ok=False)
    node = probe_node(make_io(GPU[100], http=http))
    assert len(http.calls) == 1
    assert node.artifactory_reachable.value is False
    a = finish(policy.plan_for(CFG, node))   # its notes written by render/ from the planner's data
    assert a.backends() == ("fa2", "fa2")
    assert any("trtllm.cubins" in n for n in a.notes)


def test_custom_repository_url_is_checked():
    http = Http()
    url = "http://mirror.local/cubins/"
    node = probe_node(make_io(GPU[100], http=http, env={"FLASHINFER_CUBINS_REPOSITORY": url}))
    assert [u for u, _ in http.calls] == [url]
    assert node.artifactory_url.value == url


def test_9_0_gpu_checks_artifactory_for_vllms_xqa_gate():
    """vLLM 0.33 gates XQA decode on 9.0 / 12.x on the artifactory check (needs_artifactory_check)."""
    http = Http()
    node = probe_node(make_io(GPU[90], http=http))
    assert len(http.calls) == 1 and node.artifactory_reachable.value is True
    assert needs_artifactory_check(node)


@pytest.mark.parametrize("cap,needed", [(80, False), (89, False), (90, True), (100, True), (103, True), (107, True),
                                        (110, False), (120, True), (121, True), (None, False)])
def test_needs_artifactory_check_is_one_decision(cap, needed):
    node = NodeFacts(capability=Fact.measured(cap) if cap else Fact.unknown("no GPU"))
    assert needs_artifactory_check(node) is needed


def test_8x_gpu_does_not_check_artifactory():
    http = Http()
    node = probe_node(make_io(dict(GPU[90], capability=80), http=http))
    assert http.calls == []
    assert node.artifactory_reachable.value is None
    assert node.artifactory_reachable.source == Source.unknown
    assert node.artifactory_reachable.detail


@pytest.mark.parametrize("value", ["always", "ALWAYS", " always "])
def test_artifactory_check_always(value):
    http = Http()
    node = probe_node(make_io(GPU[90], http=http, env={"ATTNPLAN_ARTIFACTORY_CHECK": value}))
    assert len(http.calls) == 1
    assert node.artifactory_reachable.value is True


def test_artifactory_check_never():
    http = Http()
    node = probe_node(make_io(GPU[100], http=http, env={"ATTNPLAN_ARTIFACTORY_CHECK": "never"}))
    assert http.calls == []
    assert node.artifactory_reachable.value is None
    assert "never" in (node.artifactory_reachable.detail or "")
    # unknown reachability fails closed: no cubins known -> trtllm-gen is not planned
    assert policy.plan_for(CFG, node).backends() == ("fa2", "fa2")


def test_artifactory_check_bad_value_means_auto():
    http = Http()
    probe_node(make_io(dict(GPU[90], capability=86), http=http, env={"ATTNPLAN_ARTIFACTORY_CHECK": "sometimes"}))
    assert http.calls == []
    probe_node(make_io(GPU[100], http=http, env={"ATTNPLAN_ARTIFACTORY_CHECK": "sometimes"}))
    assert len(http.calls) == 1


# -- FLASHINFER_CUBIN_DIR ----------------------------------------------------------------
def trtllm_cubin_dir(d: Path, *, missing: bool = False) -> Path:
    """What trtllm-gen loads (flashinfer/artifacts.py ArtifactPath.TRTLLM_GEN_FMHA): <hash>/fmha/trtllm-gen/
    with checksums.txt listing each cubin."""
    fmha = d / "2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c" / "fmha" / "trtllm-gen"
    fmha.mkdir(parents=True)
    (fmha / "checksums.txt").write_text("ab12 kernel_a.cubin\ncd34 kernel_b.cubin\nef56 include/flashInferMetaInfo.h\n")
    (fmha / "kernel_a.cubin").write_bytes(b"\x7fELF")
    if not missing:
        (fmha / "kernel_b.cubin").write_bytes(b"\x7fELF")
    return d


def test_cubin_dir_with_cubins(tmp_path):
    d = trtllm_cubin_dir(tmp_path / "cubins")
    node = probe_node(make_io(GPU[100], http=Http(ok=False), env={"FLASHINFER_CUBIN_DIR": str(d)}, which=NVCC))
    assert node.cubin_dir.value == str(d)
    assert node.cubin_dir_has_cubins.value is True
    # its checksums.txt is not FlashInfer's (CheckSumHash): FlashInfer would download the table again, and the
    # artifactory does not answer - the node is not ready for trtllm-gen, said naming the file (issue 37)
    assert "checksums.txt" in node.trtllm_kernel_table.value["error"]
    a = finish(policy.plan_for(CFG, node, engine="flashinfer"))
    assert a.backends() == ("fa2", "fa2")
    assert any("not FlashInfer's" in f for f in a.notes)
    assert policy.plan_for(CFG, node).backends() == ("fa2", "fa2")


def test_cubin_dir_with_any_cubin_is_not_enough(tmp_path):
    d = tmp_path / "cubins"
    (d / "fmha" / "sm100").mkdir(parents=True)
    (d / "fmha" / "sm100" / "kernel_a.cubin").write_bytes(b"\x7fELF")
    node = probe_node(make_io(GPU[100], http=Http(ok=False), env={"FLASHINFER_CUBIN_DIR": str(d)}))
    assert node.cubin_dir_has_cubins.value is False
    assert "checksums.txt" in node.cubin_dir_has_cubins.detail
    half = probe_node(make_io(GPU[100], env={"FLASHINFER_CUBIN_DIR": str(trtllm_cubin_dir(tmp_path / "half", missing=True))}))
    assert half.cubin_dir_has_cubins.value is False


def test_default_cubin_cache_counts(tmp_path):
    d = trtllm_cubin_dir(tmp_path / "cache")
    node = probe_node(make_io(GPU[100], default_cubin_dir=lambda env: str(d)))
    assert node.cubin_dir.value == str(d) and "default cubin cache" in node.cubin_dir.detail
    assert node.cubin_dir_has_cubins.value is True


@pytest.mark.parametrize("contents", [[], ["README.md", "kernel.cubin.txt", "sub/other.so"]])
def test_cubin_dir_without_cubins(tmp_path, contents):
    d = tmp_path / "cubins"
    d.mkdir()
    for rel in contents:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text("x")
    node = probe_node(make_io(GPU[100], http=Http(ok=False), env={"FLASHINFER_CUBIN_DIR": str(d)}))
    assert node.cubin_dir_has_cubins.value is False
    assert policy.plan_for(CFG, node).backends() == ("fa2", "fa2")


def test_cubin_dir_missing_directory(tmp_path):
    node = probe_node(make_io(GPU[100], env={"FLASHINFER_CUBIN_DIR": str(tmp_path / "absent")}))
    assert node.cubin_dir_has_cubins.value is False
    assert "no such directory" in node.cubin_dir_has_cubins.detail


def test_cubin_dir_not_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    node = probe_node(make_io(GPU[100], env={"FLASHINFER_CUBIN_DIR": str(f)}))
    assert node.cubin_dir_has_cubins.value is False
    assert "not a directory" in node.cubin_dir_has_cubins.detail


def test_cubin_dir_unset():
    node = probe_node(make_io(GPU[100]))
    assert node.cubin_dir.value is None
    assert node.cubin_dir_has_cubins.value is False


def test_cubin_dir_unreadable_does_not_crash(tmp_path):
    def denied(path):
        raise PermissionError(13, "Permission denied", path)

    node = probe_node(make_io(GPU[100], env={"FLASHINFER_CUBIN_DIR": str(tmp_path)}, dir_has_cubins=denied))
    assert node.cubin_dir_has_cubins.value is False
    assert "unreadable" in (node.cubin_dir_has_cubins.detail or "")


# -- VLLM_BATCH_INVARIANT ----------------------------------------------------------------
@pytest.mark.parametrize("raw,on", [("1", True), ("true", True), ("0", False), ("", False), (None, False)])
def test_batch_invariant_env(raw, on):
    env = {} if raw is None else {"VLLM_BATCH_INVARIANT": raw}
    node = probe_node(make_io(GPU[100], env=env, which=NVCC))
    assert node.batch_invariant_env.value is on
    assert node.batch_invariant_env.source == Source.measured
    a = finish(policy.plan_for(CFG, node, engine="flashinfer"))
    assert a.backends() == (("fa2", "fa2") if on else ("trtllm-gen", "trtllm-gen"))
    if on:
        assert any("trtllm.batch-invariant" in n for n in a.notes)
        assert {v.rule for v in policy.plan_for(CFG, node).violations} == {"vllm.batch-invariant"}


# -- the real HTTP reachability check ----------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802 - http.server API
        code = {"/ok/": 200, "/missing/": 404, "/broken/": 503}.get(self.path, 404)
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture()
def local_server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_reachable_200(local_server):
    ok, detail = http_reachable(local_server + "/ok/", 2.0)
    assert ok is True and "200" in detail


@pytest.mark.parametrize("path,code", [("/missing/", "404"), ("/broken/", "503")])
def test_http_reachable_only_on_200(local_server, path, code):
    ok, detail = http_reachable(local_server + path, 2.0)
    assert ok is False and code in detail


@pytest.mark.parametrize("url", ["file:///etc/passwd", "file:///", "data:,x"])
def test_http_reachable_non_http_never_counts(url):
    ok, detail = http_reachable(url, 0.5)
    assert ok is False and "HTTP" in detail


@pytest.fixture()
def dripping_server(monkeypatch):
    """A server that answers one byte a second and never finishes its status line."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            try:
                while not stop.is_set():
                    conn.sendall(b"H")
                    stop.wait(1.0)
            except OSError:
                pass
            finally:
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/"
    finally:
        stop.set()
        srv.close()


@pytest.mark.timeout(20)
def test_http_reachable_total_deadline_against_a_dripping_server(dripping_server):
    import time

    t0 = time.monotonic()
    ok, detail = http_reachable(dripping_server, 1.5)
    took = time.monotonic() - t0
    assert ok is False and "deadline" in detail
    assert took < 4.0, took
    node = probe_node(make_io(GPU[100], env={"FLASHINFER_CUBINS_REPOSITORY": dripping_server}, http=http_reachable),
                      artifactory_timeout=1.0)
    assert node.artifactory_reachable.value is False
    assert time.monotonic() - t0 < 8.0


def test_torch_cuda_from_version_file_when_the_tag_is_missing():
    """PyPI's torch 2.11.0 for CUDA 13.0 has no +cu130 tag: torch/version.py says cuda = '13.0'."""
    node = probe_node(make_io(GPU[90], pkgs={"torch": "2.11.0", "flashinfer-python": "0.7.2.post1"},
                              torch_cuda=lambda: "13.0"))
    assert node.torch_cuda_version.value == "13.0" and node.torch_cuda_version.detail == "torch/version.py"


def test_read_torch_cuda_parses_a_version_file(tmp_path, monkeypatch):
    import importlib.machinery

    from attnplan.node import probe as probe_mod

    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "version.py").write_text("from typing import Optional\ncuda: Optional[str] = '13.0'\n")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(pkg)]
    monkeypatch.setattr("importlib.util.find_spec", lambda name: spec if name == "torch" else None)
    assert probe_mod.read_torch_cuda() == "13.0"


def test_jit_toolchain_and_vllm_version_facts():
    node = probe_node(make_io(GPU[90], pkgs={**PKGS, "vllm": "0.33.0"}, which=lambda p: p if p.endswith("bin/nvcc") else None))
    assert node.jit_toolchain.value is True and "nvcc" in node.jit_toolchain.detail
    assert node.vllm_version.value == "0.33.0"
    none = probe_node(make_io(GPU[90]))
    assert none.jit_toolchain.value is False and none.vllm_version.value is None
    cache = probe_node(make_io(GPU[90], pkgs={**PKGS, "flashinfer-jit-cache": "0.7.2.post1"}))
    assert cache.jit_toolchain.value is True and "flashinfer-jit-cache" in cache.jit_toolchain.detail


def test_installed_vllm_outside_the_modelled_range_is_an_error_naming_them():
    node = probe_node(make_io(GPU[90], pkgs={**PKGS, "vllm": "0.20.1"}))
    with pytest.raises(policy.InvalidInputError) as info:
        policy.plan_for(CFG, node)
    assert "0.33" in str(info.value)
    assert policy.plan_for(CFG, node, engine="flashinfer").ok


def test_http_reachable_closed_port(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                  # nothing listens there now
    ok, detail = http_reachable(f"http://127.0.0.1:{port}/", 0.5)
    assert ok is False and "unreachable" in detail


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1/x", "http://127.0.0.1:0/x"])
def test_http_reachable_bad_scheme_or_host(url):
    ok, _ = http_reachable(url, 0.5)
    assert ok is False


@pytest.mark.parametrize("url", ["not a url", "http://[::1/broken"])
def test_probe_with_malformed_repository_url_does_not_crash(url):
    io = make_io(GPU[100], env={"FLASHINFER_CUBINS_REPOSITORY": url}, http=http_reachable)
    node = probe_node(io, artifactory_timeout=0.5)
    assert node.artifactory_reachable.value is False
    assert node.artifactory_reachable.detail


def test_probe_with_the_real_http_check(local_server):
    io = make_io(GPU[100], env={"FLASHINFER_CUBINS_REPOSITORY": local_server + "/ok/"}, http=http_reachable)
    node = probe_node(io, artifactory_timeout=2.0)
    assert node.artifactory_reachable.value is True


# -- NodeCache ---------------------------------------------------------------------------
def test_node_cache_probes_once_and_refreshes():
    count = {"n": 0}

    def probe():
        count["n"] += 1
        return probe_node(make_io(GPU[100] if count["n"] == 1 else GPU[90]))

    cache = NodeCache(probe)
    assert cache.peek() is None
    first = cache.get()
    assert cache.get() is first and count["n"] == 1
    assert cache.probed_at is not None and cache.probe_seconds is not None
    refreshed = cache.get(refresh=True)
    assert count["n"] == 2 and refreshed.capability.value == 90
    assert cache.get() is refreshed and cache.peek() is refreshed
    declared = policy.simulated_node("B300")
    cache.set(declared)
    assert cache.get() is declared and count["n"] == 2


def test_node_cache_is_thread_safe():
    count = {"n": 0}
    gate = threading.Event()

    def probe():
        gate.wait(1.0)
        count["n"] += 1
        return NodeFacts()

    cache = NodeCache(probe)
    threads = [threading.Thread(target=cache.get) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert count["n"] == 1


# -- NodeFacts JSON ----------------------------------------------------------------------
def test_node_facts_json_round_trip():
    node = probe_node(make_io(GPU[103], env={"VLLM_BATCH_INVARIANT": "1"}))
    data = json.loads(json.dumps(node_json(node)))
    assert data["capability"]["value"] == "10.3"
    assert data["capability"]["source"] == "measured"
    back = NodeFacts.model_validate(data)
    assert back == node
    assert back.capability.value == 103 and back.capability.source == Source.measured
    assert back.fingerprint() == node.fingerprint()


def test_answer_json_has_capability_as_text():
    a = policy.plan_for(CFG, policy.simulated_node("GB300"))
    data = json.loads(json.dumps(a.to_json()))
    assert data["node"]["capability"]["value"] == "10.3"
    assert data["node"]["capability"]["source"] == "declared"
    assert NodeFacts.model_validate(data["node"]) == a.node


@pytest.mark.parametrize("text,value", [("10.3", 103), ("9.0", 90), ("12.1", 121), ("8.6", 86)])
def test_node_facts_parse_capability_text(text, value):
    node = NodeFacts(capability=Fact.declared(text))
    assert node.capability.value == value
    assert NodeFacts.model_validate({"capability": {"value": text, "source": "declared"}}).capability.value == value


def test_node_facts_model_json_round_trip():
    node = policy.simulated_node("B200", flashinfer_version="0.6.7.post2", cubins="missing")
    assert NodeFacts.model_validate_json(node.model_dump_json()) == node


# -- import hygiene ----------------------------------------------------------------------
def test_import_policy_imports_neither_torch_nor_flashinfer():
    code = (
        "import sys, json\n"
        "import attnplan\n"
        "from attnplan import AttentionConfig, plan_for, simulated_node\n"
        "a = plan_for(AttentionConfig(head_dim=128, num_qo_heads=8), simulated_node('B200'))\n"
        "assert a.ok\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'flashinfer')))\n"
        "print(json.dumps(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []

"""The local probe: this node's facts, read at the edges (NVML, package metadata, env, HTTP).

Every reader is injected through ``ProbeIO`` so tests replace any of them; nothing here
imports torch or flashinfer (versions come from package metadata). A failing reader makes
its facts ``unknown`` with the reason - the probe itself never raises.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from ..policy.capability import capability_major
from ..policy.conditions import Pred, compile_condition
from ..policy.engine import default_ruleset
from ..policy.facts import Fact, NodeFacts
from ..policy.rulepack import RuleSet

DEFAULT_ARTIFACTORY = "https://edge.urm.nvidia.com/artifactory/sw-kernelinferencelibrary-public-generic-local/"
DEFAULT_TIMEOUT_S = 3.0
ARTIFACTORY_TTL_S = 300.0
_TRUE = {"1", "true", "yes", "on"}


def read_nvml() -> dict[str, Any]:
    """First GPU's facts from NVML (sees every GPU even where CUDA_VISIBLE_DEVICES is empty)."""
    with warnings.catch_warnings():
        # The "pynvml" wrapper distribution warns that it is deprecated; the module is the same.
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml  # type: ignore[import-untyped]

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return {"count": 0}
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
        driver = pynvml.nvmlSystemGetDriverVersion()
        try:
            mig = bool(pynvml.nvmlDeviceGetMigMode(h)[0])
        except pynvml.NVMLError:
            mig = False
        return {
            "count": count,
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "capability": int(major) * 10 + int(minor),
            "memory_gib": round(mem / (1 << 30), 1),
            "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
            "mig": mig,
        }
    finally:
        pynvml.nvmlShutdown()


def package_version(dist: str) -> Optional[str]:
    import importlib.metadata as md  # lazy: ~15 ms that `import policy` need not pay

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


# What trtllm-gen loads: flashinfer/artifacts.py ArtifactPath.TRTLLM_GEN_FMHA ("<hash>/fmha/trtllm-gen/")
# holds checksums.txt ("<sha256> <file>" lines); flashinfer/jit/cubin_loader.py get_artifact reads each
# listed file from FLASHINFER_CUBIN_DIR before downloading it. A directory counts when it holds that
# manifest and the files it lists, not any *.cubin.
TRTLLM_FMHA_MANIFEST = os.path.join("fmha", "trtllm-gen", "checksums.txt")


def dir_has_cubins(path: str, limit: int = 64) -> bool:
    """Whether ``path`` holds trtllm-gen's FMHA manifest and every cubin it lists (checked up to ``limit``)."""
    with os.scandir(path) as entries:
        hashes = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    for base in hashes[:limit]:
        manifest = os.path.join(base, TRTLLM_FMHA_MANIFEST)
        if not os.path.isfile(manifest):
            continue
        with open(manifest, encoding="utf-8", errors="replace") as fh:
            listed = [ln.split()[1] for ln in fh.read(1 << 20).splitlines() if len(ln.split()) == 2]
        cubins = [f for f in listed if f.endswith(".cubin")]
        folder = os.path.dirname(manifest)
        if cubins and all(os.path.isfile(os.path.join(folder, f)) for f in cubins[:limit]):
            return True
    return False


def default_cubin_dir(env: Mapping[str, str]) -> str:
    """FlashInfer's default cubin cache (flashinfer/jit/env.py FLASHINFER_CACHE_DIR / "cubins")."""
    base = env.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    return os.path.join(base, ".cache", "flashinfer", "cubins")


def http_reachable(url: str, timeout: float) -> tuple[bool, str]:
    """Ask the artifactory as vLLM's has_nvidia_artifactory does: reachable on HTTP 200 only, within a
    TOTAL deadline of ``timeout`` seconds (a server dripping bytes cannot hold the caller: the request
    runs in a daemon thread that is abandoned at the deadline)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    try:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
    except ValueError as exc:
        return False, f"unreachable: {exc}"
    if scheme not in ("http", "https"):
        return False, f"not an HTTP(S) URL ({scheme or 'no scheme'}): only an HTTP 200 answer counts"
    result: dict[str, tuple[bool, str]] = {}

    def run() -> None:
        try:
            for method in ("HEAD", "GET"):  # HEAD reads no body; GET (as vLLM asks) where HEAD is not served
                try:
                    req = urllib.request.Request(url, method=method)
                    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URL is config
                        result["r"] = (resp.status == 200, f"HTTP {resp.status}")
                        return
                except urllib.error.HTTPError as exc:
                    result["r"] = (False, f"HTTP {exc.code}")
                    if exc.code not in (405, 501):
                        return
        except urllib.error.HTTPError as exc:
            result["r"] = (False, f"HTTP {exc.code}")
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            result["r"] = (False, f"unreachable: {getattr(exc, 'reason', exc)}")
        except Exception as exc:  # noqa: BLE001 - an odd URL must not crash the probe
            result["r"] = (False, f"unreachable: {type(exc).__name__}: {exc}")

    t = threading.Thread(target=run, name="attnplan-artifactory-check", daemon=True)
    t.start()
    t.join(timeout)
    if "r" not in result:
        return False, f"no complete answer within {timeout:g}s (total deadline)"
    return result["r"]


def read_torch_cuda() -> Optional[str]:
    """torch.version.cuda read from torch/version.py without importing torch (PyPI's CUDA wheels,
    e.g. torch 2.11.0 for CUDA 13.0, carry no +cuXXX tag in their version)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = os.path.join(loc, "version.py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([0-9.]+)['\"]", fh.read(1 << 16), re.M)
            return m.group(1) if m else None
    return None


def nvcc_path(env: Mapping[str, str], which: Callable[[str], Optional[str]] = shutil.which) -> Optional[str]:
    """The nvcc FlashInfer's JIT would run (vllm/utils/flashinfer.py _flashinfer_nvcc_path)."""
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not cuda_home:
        found = which("nvcc")
        cuda_home = os.path.dirname(os.path.dirname(found)) if found else "/usr/local/cuda"
    return which(os.path.join(cuda_home, "bin", "nvcc"))


@dataclass
class ProbeIO:
    """The probe's edges. Replace any field in tests."""

    nvml: Callable[[], dict[str, Any]] = read_nvml
    package_version: Callable[[str], Optional[str]] = package_version
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    dir_has_cubins: Callable[[str], bool] = dir_has_cubins
    http_reachable: Callable[[str, float], tuple[bool, str]] = http_reachable
    hostname: Callable[[], str] = socket.gethostname
    torch_cuda: Callable[[], Optional[str]] = read_torch_cuda
    which: Callable[[str], Optional[str]] = shutil.which
    default_cubin_dir: Optional[Callable[[Mapping[str, str]], str]] = default_cubin_dir


def needs_artifactory_check(node: NodeFacts, ruleset: Optional[RuleSet] = None) -> bool:
    """Whether this node's plans can depend on the artifactory check (trtllm-gen's cubins, or vLLM 0.33's
    gate on XQA decode): backends.yaml ``cubins.artifactory_check`` over the node's capability. The one
    place this is decided."""
    cap = node.capability.value
    if not isinstance(cap, int) or isinstance(cap, bool):
        return False
    rs = ruleset if ruleset is not None else default_ruleset()
    check = rs.cubins.artifactory_check if rs.cubins is not None else None
    if check is None:
        return False
    return _compiled(check.when).test({"node.capability": cap, "node.capability_major": capability_major(cap)})


@functools.lru_cache(maxsize=8)
def _compiled_json(when: str) -> Pred:
    return compile_condition(json.loads(when))


def _compiled(when: Mapping[str, Any]) -> Pred:
    return _compiled_json(json.dumps(when, sort_keys=True))


def _torch_cuda(version: Optional[str]) -> Optional[str]:
    # "2.11.0+cu130" -> "13.0"; "+cpu" or no local tag -> None. Read without importing torch.
    if not version or "+cu" not in version:
        return None
    tag = version.split("+cu", 1)[1]
    digits = "".join(ch for ch in tag if ch.isdigit())
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else None


def artifactory_policy(env: Mapping[str, str]) -> str:
    """``auto`` (check where ``needs_artifactory_check`` says so), ``always`` or ``never``."""
    value = env.get("ATTNPLAN_ARTIFACTORY_CHECK", "auto").strip().lower()
    return value if value in ("auto", "always", "never") else "auto"


def check_artifactory(io: ProbeIO, timeout: float) -> tuple[Fact, Fact]:
    url = io.env.get("FLASHINFER_CUBINS_REPOSITORY", DEFAULT_ARTIFACTORY)
    ok, detail = io.http_reachable(url, timeout)
    return Fact.measured(url), Fact.measured(ok, detail)


def probe_node(io: ProbeIO | None = None, *, artifactory_timeout: float = DEFAULT_TIMEOUT_S,
               check_artifactory_now: Optional[bool] = None) -> NodeFacts:
    """Read this node's facts. Never raises: what cannot be read is ``unknown`` with why."""
    io = io or ProbeIO()
    facts: dict[str, Fact] = {}
    try:
        facts["hostname"] = Fact.measured(io.hostname())
    except OSError as exc:
        facts["hostname"] = Fact.unknown(str(exc))
    try:
        gpu = io.nvml()
    except Exception as exc:  # noqa: BLE001 - any NVML/driver failure means "no device known"
        gpu = None
        why = f"NVML: {type(exc).__name__}: {exc}"
        for k in ("gpu_name", "capability", "gpu_count", "gpu_memory_gib", "driver_version", "mig_enabled"):
            facts[k] = Fact.unknown(why)
    if gpu is not None:
        if gpu.get("count", 0) == 0:
            facts["gpu_count"] = Fact.measured(0, "NVML")
            for k in ("gpu_name", "capability", "gpu_memory_gib", "mig_enabled"):
                facts[k] = Fact.unknown("no GPU")
        else:
            facts.update(
                gpu_name=Fact.measured(gpu["name"], "NVML"), capability=Fact.measured(gpu["capability"], "NVML"),
                gpu_count=Fact.measured(gpu["count"], "NVML"), gpu_memory_gib=Fact.measured(gpu["memory_gib"], "NVML"),
                mig_enabled=Fact.measured(gpu["mig"], "NVML"),
            )
        facts["driver_version"] = Fact.measured(gpu.get("driver"), "NVML") if gpu.get("driver") else Fact.unknown("NVML")

    tv = io.package_version("torch")
    facts["torch_version"] = Fact.measured(tv, "package metadata") if tv else Fact.unknown("torch not installed")
    if tv:
        try:
            cuda = io.torch_cuda()
            how = "torch/version.py"
        except OSError:
            cuda, how = None, ""
        if cuda is None:
            cuda, how = _torch_cuda(tv), "torch local version tag"
        facts["torch_cuda_version"] = (Fact.measured(cuda, how) if cuda is not None
                                       else Fact.measured(None, "torch built without CUDA"))
    else:
        facts["torch_cuda_version"] = Fact.unknown("torch not installed")
    vv = io.package_version("vllm")
    facts["vllm_version"] = Fact.measured(vv, "package metadata") if vv else Fact.measured(None, "vllm not installed")
    sv = io.package_version("sglang")
    facts["sglang_version"] = Fact.measured(sv, "package metadata") if sv else Fact.measured(None, "sglang not installed")
    fi = io.package_version("flashinfer-python") or io.package_version("flashinfer")
    jit_cache = io.package_version("flashinfer-jit-cache")
    facts["flashinfer_jit_cache_version"] = (Fact.measured(jit_cache, "package metadata") if jit_cache
                                             else Fact.measured(None, "flashinfer-jit-cache not installed"))
    # What `import flashinfer` says of its kernel wheels, per FlashInfer release (node/flashinfer_packages.py):
    # before 0.7.2 a mismatch raises at import, from 0.7.2 the wheel is ignored with a warning.
    from .flashinfer_packages import import_error, package_mismatches

    mismatches = package_mismatches(fi, io.package_version("flashinfer-cubin"), jit_cache, env=io.env)
    err = import_error(mismatches)
    facts["flashinfer_import_error"] = (Fact.measured(err.message, f"flashinfer/jit/env.py ({err.source})") if err
                                        else Fact.measured(None, "no kernel wheel FlashInfer refuses"))
    # FlashInfer uses a jit-cache wheel only at its own version (+cuXXX allowed) and ignores any other
    # (flashinfer/jit/env.py _check_jit_cache_version, _get_aot_providers): that one builds nothing.
    cache_ok = bool(jit_cache) and not any(m.package == "flashinfer-jit-cache" for m in mismatches) and (
        fi is None or jit_cache == fi or jit_cache.startswith(f"{fi}+"))
    try:
        nvcc = nvcc_path(io.env, io.which)
    except OSError:
        nvcc = None
    if nvcc or cache_ok:
        facts["jit_toolchain"] = Fact.measured(True, f"nvcc at {nvcc}" if nvcc else f"flashinfer-jit-cache {jit_cache}")
    elif jit_cache:
        facts["jit_toolchain"] = Fact.measured(False, f"no nvcc, and flashinfer-jit-cache {jit_cache} does not match "
                                                      f"flashinfer {fi} (FlashInfer ignores it)")
    else:
        facts["jit_toolchain"] = Fact.measured(False, "no nvcc (CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda) and no flashinfer-jit-cache")
    facts["flashinfer_version"] = Fact.measured(fi, "package metadata") if fi else Fact.measured(None, "flashinfer not installed")
    fc = io.package_version("flashinfer-cubin")
    facts["flashinfer_cubin_version"] = Fact.measured(fc, "package metadata") if fc else Fact.measured(None, "flashinfer-cubin not installed")
    facts["cubin_dir"], facts["cubin_dir_has_cubins"] = _cubin_dir_facts(io)

    policy = artifactory_policy(io.env)
    if check_artifactory_now is None:
        check_artifactory_now = policy == "always" or (policy == "auto" and needs_artifactory_check(NodeFacts(**{
            k: v for k, v in facts.items() if k == "capability"})))
    url = io.env.get("FLASHINFER_CUBINS_REPOSITORY", DEFAULT_ARTIFACTORY)
    if check_artifactory_now:
        facts["artifactory_url"], facts["artifactory_reachable"] = check_artifactory(io, artifactory_timeout)
    else:
        why = ("not checked: no GPU here that trtllm-gen or vLLM's XQA gate could use" if policy == "auto"
               else "not checked (ATTNPLAN_ARTIFACTORY_CHECK=never)")
        facts["artifactory_url"] = Fact.measured(url)
        facts["artifactory_reachable"] = Fact.unknown(why)

    facts["trtllm_kernel_table"] = _kernel_table_fact(io, fi, facts["capability"].value)
    raw = io.env.get("VLLM_BATCH_INVARIANT")
    facts["batch_invariant_env"] = Fact.measured(raw is not None and raw.strip().lower() in _TRUE,
                                                 f"VLLM_BATCH_INVARIANT={raw!r}" if raw is not None else "unset")
    return NodeFacts(**facts)


def _cubin_dir_facts(io: ProbeIO) -> tuple[Fact, Fact]:
    """FLASHINFER_CUBIN_DIR, else FlashInfer's default cubin cache; a missing, non-directory or
    unreadable one is a fact with the reason, never silently "no cubins"."""
    raw = io.env.get("FLASHINFER_CUBIN_DIR")
    if raw:
        path, origin = raw, "FLASHINFER_CUBIN_DIR"
    elif io.default_cubin_dir is not None:
        path, origin = io.default_cubin_dir(io.env), "FlashInfer's default cubin cache"
    else:
        return Fact.measured(None, "FLASHINFER_CUBIN_DIR unset"), Fact.measured(False, "FLASHINFER_CUBIN_DIR unset")
    where = Fact.measured(path, origin)
    try:
        if not os.path.exists(path):
            return where, Fact.measured(False, f"{origin} {path}: no such directory")
        if not os.path.isdir(path):
            return where, Fact.measured(False, f"{origin} {path}: not a directory")
        if not os.access(path, os.R_OK | os.X_OK):
            return where, Fact.measured(False, f"{origin} {path}: not readable")
        has = io.dir_has_cubins(path)
    except OSError as exc:
        return where, Fact.measured(False, f"{origin} {path}: unreadable: {exc}")
    return where, Fact.measured(has, f"{origin} {path}: " + ("trtllm-gen manifest and cubins present" if has
                                                                else "no trtllm-gen manifest (fmha/trtllm-gen/checksums.txt) with its cubins"))


class NodeCache:
    """The local node's facts, probed once and kept; ``refresh`` re-probes (thread-safe)."""

    def __init__(self, probe: Callable[[], NodeFacts] = probe_node):
        self._probe = probe
        self._lock = threading.Lock()
        self._node: Optional[NodeFacts] = None
        self.probed_at: Optional[float] = None
        self.probe_seconds: Optional[float] = None

    def get(self, refresh: bool = False) -> NodeFacts:
        with self._lock:
            if self._node is None or refresh:
                t0 = time.perf_counter()
                self._node = self._probe()
                self.probe_seconds = time.perf_counter() - t0
                self.probed_at = time.time()
            return self._node

    def peek(self) -> Optional[NodeFacts]:
        return self._node

    def set(self, node: NodeFacts) -> None:
        with self._lock:
            self._node = node
            self.probed_at = time.time()


LOCAL = NodeCache()


def local_node(refresh: bool = False) -> NodeFacts:
    """This machine's facts (cached after the first probe)."""
    return LOCAL.get(refresh)


# -- the node's trtllm-gen kernel table (issue 37) ------------------------------------------------------------
def _package_dir(name: str) -> Optional[str]:
    """Where an installed package lives, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _kernel_table_fact(io: ProbeIO, fi: Optional[str], capability: Any) -> Fact:
    """The node's own trtllm-gen kernel table (issue 37), read where FlashInfer reads it, on the GPUs its kernels
    are built for (10.x); it then decides which kernel each trtllm-gen phase loads (candidates.py)."""
    from ..kernels.trtllm_gen.table import TableError

    if not isinstance(capability, int) or capability_major(capability) != 10 or not fi:
        return Fact.measured(None, "not read: no 10.x GPU or no flashinfer here")
    try:
        nt = probe_trtllm_table(io, fi)
    except TableError as exc:
        # FlashInfer loads checksums.txt only at its CheckSumHash and downloads it again otherwise
        # (flashinfer/jit/cubin_loader.py get_artifact, jit/attention/modules.py gen_trtllm_gen_fmha_module): the
        # table it then runs is its pin's, as on a node without one - where it can download (the rules' reading)
        return Fact.measured({"error": str(exc)}, "the node's kernel table is corrupt, truncated or foreign")
    except OSError as exc:
        return Fact.measured(None, f"not read: {exc}")
    if nt.table is None:
        return Fact.measured(None, nt.why)
    loc = nt.location
    return Fact.measured({"cubin_dir": loc.cubin_dir, "pin": loc.pin, "checksums_sha256": loc.checksums_sha256,
                          "origin": loc.origin}, nt.why)


def installed_artifact_pin() -> Optional[tuple[str, str]]:
    """(pin, checksums sha256) of the installed flashinfer's trtllm-gen FMHA artifact, read from its
    flashinfer/artifacts.py (ArtifactPath.TRTLLM_GEN_FMHA, CheckSumHash.TRTLLM_GEN_FMHA) without importing it."""
    from ..kernels.trtllm_gen.node import artifact_pin

    d = _package_dir("flashinfer")
    if d is None or not os.path.isfile(os.path.join(d, "artifacts.py")):
        return None
    with open(os.path.join(d, "artifacts.py"), encoding="utf-8", errors="replace") as fh:
        return artifact_pin(fh.read())


def probe_trtllm_table(io: ProbeIO | None = None, flashinfer_version: Optional[str] = None,
                       pin: Optional[tuple[str, str]] = None) -> Any:
    """The node's own trtllm-gen kernel table where FlashInfer looks for it (kernels/trtllm_gen/node.py):
    a NodeTable (table None when not on disk, with why). A corrupt, truncated or foreign table raises
    TableError naming the file: the node is not ready, and nothing falls back to the shipped table."""
    from ..kernels.trtllm_gen import node as tgnode

    io = io or ProbeIO()
    fi = flashinfer_version or io.package_version("flashinfer-python") or io.package_version("flashinfer")
    cubin_v = io.package_version("flashinfer-cubin")
    cubin_pkg = _package_dir("flashinfer_cubin") if cubin_v else None
    cubin_dir = os.path.join(cubin_pkg, "cubins") if cubin_pkg else None
    if pin is None and flashinfer_version is None:
        pin = installed_artifact_pin()
    loc = tgnode.locate(io.env, fi, cubin_v, cubin_dir, pin)
    return tgnode.load(loc)

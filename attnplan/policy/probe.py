"""The local probe: this node's facts, read at the edges (NVML, package metadata, env, HTTP).

Every reader is injected through ``ProbeIO`` so tests replace any of them; nothing here
imports torch or flashinfer (versions come from package metadata). A failing reader makes
its facts ``unknown`` with the reason - the probe itself never raises.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from .facts import Fact, NodeFacts

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


def dir_has_cubins(path: str, limit: int = 20000) -> bool:
    seen = 0
    for _root, _dirs, files in os.walk(path):
        for f in files:
            if f.endswith(".cubin"):
                return True
            seen += 1
            if seen >= limit:
                return False
    return False


def http_reachable(url: str, timeout: float) -> tuple[bool, str]:
    """HEAD the artifactory; any HTTP answer (even 403/404) means the host serves."""
    import urllib.error
    import urllib.request

    try:
        req = urllib.request.Request(url, method="HEAD")  # a malformed URL raises here
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URL is config
            return True, f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return exc.code < 500, f"HTTP {exc.code}"
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"unreachable: {reason}"


@dataclass
class ProbeIO:
    """The probe's edges. Replace any field in tests."""

    nvml: Callable[[], dict[str, Any]] = read_nvml
    package_version: Callable[[str], Optional[str]] = package_version
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    dir_has_cubins: Callable[[str], bool] = dir_has_cubins
    http_reachable: Callable[[str, float], tuple[bool, str]] = http_reachable
    hostname: Callable[[], str] = socket.gethostname


def _torch_cuda(version: Optional[str]) -> Optional[str]:
    # "2.11.0+cu130" -> "13.0"; "+cpu" or no local tag -> None. Read without importing torch.
    if not version or "+cu" not in version:
        return None
    tag = version.split("+cu", 1)[1]
    digits = "".join(ch for ch in tag if ch.isdigit())
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else None


def artifactory_policy(env: Mapping[str, str]) -> str:
    """``auto`` (check only where a 10.x GPU could use trtllm-gen), ``always`` or ``never``."""
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
    facts["torch_cuda_version"] = Fact.measured(_torch_cuda(tv), "torch local version tag") if tv else Fact.unknown("torch not installed")
    fi = io.package_version("flashinfer-python") or io.package_version("flashinfer")
    facts["flashinfer_version"] = Fact.measured(fi, "package metadata") if fi else Fact.measured(None, "flashinfer not installed")
    fc = io.package_version("flashinfer-cubin")
    facts["flashinfer_cubin_version"] = Fact.measured(fc, "package metadata") if fc else Fact.measured(None, "flashinfer-cubin not installed")
    cubin_dir = io.env.get("FLASHINFER_CUBIN_DIR")
    if cubin_dir:
        facts["cubin_dir"] = Fact.measured(cubin_dir, "FLASHINFER_CUBIN_DIR")
        try:
            facts["cubin_dir_has_cubins"] = Fact.measured(io.dir_has_cubins(cubin_dir), cubin_dir)
        except OSError as exc:
            facts["cubin_dir_has_cubins"] = Fact.measured(False, f"unreadable: {exc}")
    else:
        facts["cubin_dir"] = Fact.measured(None, "FLASHINFER_CUBIN_DIR unset")
        facts["cubin_dir_has_cubins"] = Fact.measured(False, "FLASHINFER_CUBIN_DIR unset")

    policy = artifactory_policy(io.env)
    cap = facts.get("capability", Fact.unknown()).value
    if check_artifactory_now is None:
        check_artifactory_now = policy == "always" or (policy == "auto" and isinstance(cap, int) and cap // 10 == 10)
    url = io.env.get("FLASHINFER_CUBINS_REPOSITORY", DEFAULT_ARTIFACTORY)
    if check_artifactory_now:
        facts["artifactory_url"], facts["artifactory_reachable"] = check_artifactory(io, artifactory_timeout)
    else:
        why = "not checked: no family-10.x GPU here" if policy == "auto" else "not checked (ATTNPLAN_ARTIFACTORY_CHECK=never)"
        facts["artifactory_url"] = Fact.measured(url)
        facts["artifactory_reachable"] = Fact.unknown(why)

    raw = io.env.get("VLLM_BATCH_INVARIANT")
    facts["batch_invariant_env"] = Fact.measured(raw is not None and raw.strip().lower() in _TRUE,
                                                 f"VLLM_BATCH_INVARIANT={raw!r}" if raw is not None else "unset")
    return NodeFacts(**facts)


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

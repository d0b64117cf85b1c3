"""vLLM's own selection code, run on a CPU for any CUDA capability: the installed vLLM (0.33.0), or a
release's code put first on PYTHONPATH (0.31.0, 0.32.0: ``python -m attnplan.oracle.vllm --release``).

What is patched, and nothing else:
- ``vllm._C_stable_libtorch``, ``vllm._flashmla_C``, ``vllm._flashmla_extension_C`` and
  ``vllm.vllm_flash_attn._vllm_fa{2,3}_C`` are empty modules: the
  compiled extensions need libcuda. The real CUDA wheel ships both FA2 and FA3 extensions, so the
  pure-Python version logic in ``vllm_flash_attn/flash_attn_interface.py`` then decides FA2/FA3/FA4
  support per capability exactly as on a GPU.
- ``vllm.platforms._current_platform`` is a ``CudaPlatform`` subclass whose ``get_device_capability``
  returns the capability under test; ``is_device_capability``, ``is_device_capability_family`` and
  ``has_device_capability`` are vLLM's own and derive from it.
- ``vllm.utils.flashinfer.has_nvidia_artifactory`` returns the case's reachability (it is an HTTP
  probe); the ``functools.cache`` of ``supports_trtllm_attention`` is cleared per case.
- ``VLLM_BATCH_INVARIANT`` is set in the environment per case (vllm.envs reads it lazily).
- FlashInfer's ``get_compute_capability`` and ``torch.version.cuda`` are patched only while
  ``determine_attention_backend`` runs.
- The ``VllmConfig`` is vLLM's own default one (``VllmConfig()``, its real ``AttentionConfig``); its
  ``model_config`` is a small stand-in with the attributes the called functions read (building a
  real ``ModelConfig`` needs a checkpoint per case).

Must be imported before anything else imports vLLM, in a process of its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from attnplan.errors import SetupError

_STUBS = ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C",
          "vllm._flashmla_C", "vllm._flashmla_extension_C")


def _install() -> dict[str, Any]:
    if "vllm.platforms.cuda" in sys.modules and not getattr(sys.modules["vllm.platforms"], "_attnplan_oracle", False):
        raise SetupError("attnplan.oracle.vllm_env must be imported before vLLM's CUDA platform: run it as its own process")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cuda")
    for name in _STUBS:
        sys.modules.setdefault(name, types.ModuleType(name))
    import torch  # noqa: F401
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatform
    from vllm.platforms.interface import DeviceCapability

    state: dict[str, Any] = {"cap": DeviceCapability(9, 0), "artifactory": True}

    class OraclePlatform(CudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return state["cap"]

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return f"oracle-sm{state['cap'].major}{state['cap'].minor}"

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return 132   # read at import by cutlass_mla's workspace; no selection reads it

    platforms._current_platform = OraclePlatform()
    platforms._attnplan_oracle = True
    import vllm.utils.flashinfer as vfi

    vfi.has_nvidia_artifactory = lambda: state["artifactory"]  # an HTTP probe in vLLM
    # Backend modules that allocate a CUDA workspace at import (cutlass_mla.py SM100Workspace): imported
    # once with CUDA allocations sent to the meta device, so their classes' selection code can run.
    real_empty = torch.empty

    def _meta_empty(*args: Any, **kw: Any) -> Any:
        if str(kw.get("device", "")).startswith("cuda"):
            kw["device"] = "meta"
        return real_empty(*args, **kw)

    torch.empty = _meta_empty
    try:
        import vllm.v1.attention.backends.mla.cutlass_mla  # noqa: F401
    finally:
        torch.empty = real_empty
    state["platform"] = OraclePlatform
    import vllm

    # python -m attnplan.oracle.vllm --release X runs this process with X's code first on PYTHONPATH: a path
    # that does not hold X (a stale or mis-unpacked release) would silently judge another release's code.
    want = os.environ.get("ATTNPLAN_ORACLE_VLLM_RELEASE")
    state["version"] = getattr(vllm, "__version__", "unknown")
    if want and state["version"] != want:
        raise SetupError(f"asked for vLLM {want}'s code, but {vllm.__file__} is vLLM {state['version']}")
    return state


_STATE = _install()

import torch  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402
from vllm.utils import flashinfer as vfi  # noqa: E402
from vllm.v1.attention.backends import flashinfer as vfib  # noqa: E402
from vllm.v1.attention.backends.mla import flashinfer_mla as vfim  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.attention.selector import AttentionSelectorConfig  # noqa: E402

import flashinfer.utils as fiu  # noqa: E402

VLLM_VERSION: str = _STATE["version"]


def _worker_utils_functions(*names: str) -> dict[str, Any]:
    """vLLM's own ``select_common_block_size`` and its helper, compiled from the installed
    vllm/v1/worker/utils.py: importing that module pulls in Triton kernels (mamba), absent here."""
    import ast
    import importlib.util
    from collections.abc import Sequence

    from vllm.v1.attention.backend import AttentionBackend, MultipleOf

    path = importlib.util.find_spec("vllm").submodule_search_locations[0] + "/v1/worker/utils.py"
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    if names[-1] not in {d.name for d in defs}:
        # the last name is the one called; the others are helpers a release may inline (0.31.0 nests
        # _block_size_is_supported inside select_common_block_size; 0.32.0 lifts it to module level)
        raise SetupError(f"{path} no longer defines {names[-1]}: point the oracle at the new vLLM's code")
    ns: dict[str, Any] = {"AttentionBackend": AttentionBackend, "MultipleOf": MultipleOf, "Sequence": Sequence,
                          "KVCacheSpec": Any, "__name__": "vllm.v1.worker.utils"}
    module = ast.fix_missing_locations(ast.Module(body=[ast.ImportFrom("__future__", [ast.alias("annotations")], 0), *defs],
                                                  type_ignores=[]))
    exec(compile(module, path, "exec"), ns)
    return ns


select_common_block_size = _worker_utils_functions("_block_size_is_supported", "select_common_block_size")[
    "select_common_block_size"]

VLLM_KV = {"auto": "auto", "fp16": "float16", "bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
           "fp8_e5m2": "fp8_e5m2", "nvfp4": "nvfp4"}
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}
TORCH_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float8_e4m3fn: "float8_e4m3fn",
              torch.float8_e5m2: "float8_e5m2", torch.uint8: "uint8"}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


@dataclass
class _ModelStandIn:
    """What the called vLLM functions read of a ModelConfig (per rank, as vLLM's getters return)."""

    num_heads: int
    num_kv_heads: int
    dtype: Any
    hf_text_config: Any
    is_diffusion: bool = False
    is_mm_prefix_lm: bool = False
    rswa_window: Optional[int] = None
    max_model_len: int = 8192
    head_size: int = 128

    def get_head_size(self) -> int:
        return self.head_size

    def get_num_attention_heads(self, parallel_config: Any = None) -> int:
        return self.num_heads

    def get_num_kv_heads(self, parallel_config: Any = None) -> int:
        return self.num_kv_heads


@contextlib.contextmanager
def case_env(case: Any) -> Iterator[VllmConfig]:
    """The platform, environment and current VllmConfig for one case."""
    _STATE["cap"] = DeviceCapability(case.capability // 10, case.capability % 10)
    _STATE["artifactory"] = case.artifactory
    old_bi = os.environ.get("VLLM_BATCH_INVARIANT")
    os.environ["VLLM_BATCH_INVARIANT"] = "1" if case.batch_invariant else "0"
    vfi.supports_trtllm_attention.cache_clear()
    vc = VllmConfig()
    hf = types.SimpleNamespace(attn_logit_softcapping=case.logits_soft_cap, model_type="oracle")
    if case.mla:
        hf.__dict__.update(qk_nope_head_dim=case.qk_nope_head_dim, qk_rope_head_dim=64, v_head_dim=case.v_head_dim,
                           kv_lora_rank=512)
    object.__setattr__(vc, "model_config", _ModelStandIn(case.num_qo_heads, case.num_kv_heads, TORCH[case.dtype], hf,
                                                         head_size=case.head_size_for_selector))
    vc.cache_config.cache_dtype = VLLM_KV[case.kv_cache_dtype]
    vc.cache_config.block_size = case.block_size if case.block_size is not None else 16
    vc.parallel_config.decode_context_parallel_size = case.dcp
    try:
        with set_current_vllm_config(vc):
            yield vc
    finally:
        vfi.supports_trtllm_attention.cache_clear()
        if old_bi is None:
            os.environ.pop("VLLM_BATCH_INVARIANT", None)
        else:
            os.environ["VLLM_BATCH_INVARIANT"] = old_bi


def selector_config(case: Any) -> AttentionSelectorConfig:
    return AttentionSelectorConfig(
        head_size=case.head_size_for_selector, dtype=TORCH[case.dtype], kv_cache_dtype=VLLM_KV[case.kv_cache_dtype],
        block_size=case.block_size, use_mla=case.mla, has_sink=case.sinks,
        has_sliding_window=case.sliding_window is not None, use_batch_invariant=case.batch_invariant,
        use_dcp=case.dcp > 1)


def default_backend(case: Any) -> tuple[Optional[str], dict[str, list[str]]]:
    """vLLM's pick without --attention-backend (CudaPlatformBase.get_valid_backends, lowest priority index)."""
    valid, invalid = _STATE["platform"].get_valid_backends(_STATE["cap"], selector_config(case), num_heads=case.num_qo_heads)
    best = min(valid, key=lambda c: c.priority).backend.name if valid else None
    return best, {b.name: r for b, (_, r) in invalid.items()}


def validate(case: Any, name: str) -> list[str]:
    """--attention-backend NAME: the backend class's own validate_configuration (its reasons; [] = accepted)."""
    cls = AttentionBackendEnum[name].get_class()
    return list(cls.validate_configuration(device_capability=_STATE["cap"], **selector_config(case)._asdict()))


def determine_backend(q: Any, kv: Any, head_qk: int, head_vo: int, torch_cuda: str = "13.0") -> str:
    """FlashInfer 0.7.2.post1's backend="auto" (flashinfer/utils.py determine_attention_backend)."""
    cap = (_STATE["cap"].major, _STATE["cap"].minor)
    old_cc, old_cuda = fiu.get_compute_capability, torch.version.cuda
    fiu.get_compute_capability = lambda device: cap
    torch.version.cuda = torch_cuda
    try:
        return fiu.determine_attention_backend(torch.device("cpu"), 0, False, False, q, kv,
                                               head_dim_qk=head_qk, head_dim_vo=head_vo)
    finally:
        fiu.get_compute_capability, torch.version.cuda = old_cc, old_cuda


def common_block_size(backend_name: str, block_size: int) -> Optional[int]:
    cls = AttentionBackendEnum[backend_name].get_class()
    try:
        return select_common_block_size(block_size, [cls])
    except ValueError:
        return None


__all__ = ["case_env", "default_backend", "validate", "determine_backend", "common_block_size", "vfi", "vfib", "vfim",
           "TORCH", "TORCH_NAME", "FP8", "VLLM_KV", "torch"]

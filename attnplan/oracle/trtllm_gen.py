"""``python -m attnplan.oracle.trtllm_gen``: the trtllm-gen selection port against FlashInfer's own code.

FlashInfer decides on the host which trtllm-gen FMHA cubin a call loads (include/flashinfer/trtllm/fmha/
fmhaKernels.cuh, fmhaRunner.cuh, fmhaRunnerParams.h, common.h). This oracle compiles those headers,
verbatim from a flashinfer-python install, with g++ into a small harness (trtllm_gen_harness.cpp) over a
kernel table (flashInferMetaInfo.h regenerated from attnplan's shipped table, or the original header),
runs the same queries through it and through ``attnplan.kernels.trtllm_gen``, and counts agreement.

Nothing of FlashInfer's selection is rewritten here: the harness includes fmhaRunner.cuh (with ``private``
defined as ``public`` to reach the runner's kernel object), builds the runner params the way
csrc/trtllm_fmha_kernel_launcher.cu does (its TVM-FFI entry points cannot be compiled without TVM), calls
``isSupportedWithInfo`` (the launcher's "Missing TRTLLM-GEN kernel" check) and then ``run()`` itself, and
prints the function run() launches. What needs a GPU is stubbed; each stub and why:

``STUBS`` (system headers the real ones come from the CUDA toolkit):
  * cuda.h / cuda_runtime.h / cuda_runtime_api.h / cuda_fp16.h / cuda_bf16.h / cuda_fp8.h /
    cuda/std/cfloat: types only (CUfunction, CUlaunchConfig, __nv_bfloat16, float2, FLT_MAX ...), so
    the headers parse without the toolkit.
  * cudaMemGetInfo (common.h getDeviceMemoryInfo, unused by selection) -> 0;
  * cudaGetDevice -> device 0; cudaDeviceGetAttribute(compute capability) -> the queried SM
    (common.h getSMVersion, read by TllmGenFmhaRunner's constructor: the query names the SM).
  * cuCtxGetDevice / cuDeviceGetAttribute(max shared memory per block opt-in) -> 232448 bytes, the
    SM100/SM103 value (227 KiB; FlashInfer 0.7.x filters kernels by it in loadKernels).
  * cuModuleLoadData / cuFuncSetAttribute / cuGetErrorName / cuGetErrorString: succeed (loading a cubin).
  * cuModuleGetFunction: returns a handle carrying the function's name, and cuLaunchKernelEx records
    it: the harness prints the kernel run() actually launches.
  * cuOccupancyMaxActiveClusters: returns the query's maxActiveClusters. It is a property of the GPU and
    the kernel's cluster size; run() falls back from CgaSmemReduction to GmemReduction when it is too
    small. The oracle asks both outcomes (a large value, and 0) and the port answers both.
  * getCubin (the cubin loader, csrc): records the path, returns a placeholder (no download).
Stubbed FlashInfer files (they launch device code and take no part in selection):
  * utils.cuh: device helpers; only ceil_div / round_up / UpPowerOfTwo / FLASHINFER_CUDA_CHECK are used
    on the host path and are given with the same bodies.
  * kernelParams.h: KernelParams::setKernelParams builds TMA descriptors (cute, cuTensorMapEncodeTiled)
    after the kernel is chosen; stubbed to an empty KernelParams with the fields run() writes.
  * fmhaReduction.h (runFmhaReduction) and lse.cuh (ComputeLSEFromMD): device kernels launched after
    the FMHA kernel; no-ops.

Usage (measured 2026-11-25/26, 100,000 configurations each, 100.000 % agreement; per release see
/tmp/h/trtllm-releases.md and scripts/trtllm_release_headers.sh):
    python -m attnplan.oracle.trtllm_gen --configs 100000 --seed 0      # installed flashinfer (0.7.2.post1)
    scripts/trtllm_release_headers.sh 0.7.1 /tmp/fi-0.7.1                 # the headers the oracle compiles
    python -m attnplan.oracle.trtllm_gen --release 0.7.1 --include /tmp/fi-0.7.1 --configs 100000 --seed 0
--release names the flashinfer release whose selection code the port runs (select.code_of; it must be the
release of the headers in --include when they say); --include is that release's flashinfer/data/include,
or a directory holding it (an unzipped wheel). Without --include it uses the installed flashinfer package's
headers. --meta-info compiles FlashInfer's original header (from the flashinfer-cubin wheel) instead of one
regenerated from the shipped table, which checks the extraction too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Optional

from attnplan.errors import SetupError, SourceNotFoundError

from ..kernels.trtllm_gen.table import DATA_TYPES, KernelTable, shipped, sm_constant

HARNESS = Path(__file__).with_name("trtllm_gen_harness.cpp")

STUB_STATE = r"""
#pragma once
#include <string>
namespace oracle_stub {
inline int g_sm = 100;
inline int g_max_active_clusters = 1 << 20;
inline std::string g_launched;
inline std::string g_cubin;
}
"""

_CUDA_H = r"""
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include "oracle_stub_state.h"
#define CUDA_VERSION 12090
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
typedef int CUresult;
#define CUDA_SUCCESS 0
typedef int CUdevice;
struct CUfunc_st { std::string name; };
typedef CUfunc_st* CUfunction;
typedef struct CUmod_st* CUmodule;
typedef struct CUstream_st* CUstream;
typedef CUstream cudaStream_t;
typedef int cudaError_t;
#define cudaSuccess 0
enum CUfunction_attribute { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 12 };
enum CUdevice_attribute { CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97 };
enum CUlaunchAttributeID { CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
enum CUclusterSchedulingPolicy { CU_CLUSTER_SCHEDULING_POLICY_DEFAULT = 0,
  CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1 };
struct CUlaunchAttributeValue { struct { unsigned x, y, z; } clusterDim;
  CUclusterSchedulingPolicy clusterSchedulingPolicyPreference; int programmaticStreamSerializationAllowed; };
struct CUlaunchAttribute { CUlaunchAttributeID id; CUlaunchAttributeValue value; };
struct CUlaunchConfig { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
  sharedMemBytes; CUstream hStream; CUlaunchAttribute* attrs; unsigned numAttrs; };
struct float2 { float x, y; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMultiProcessorCount = 16 };
inline CUresult cuGetErrorName(CUresult, const char** s) { *s = "stub"; return 0; }
inline CUresult cuGetErrorString(CUresult, const char** s) { *s = "stub"; return 0; }
inline const char* cudaGetErrorString(cudaError_t) { return "stub"; }
inline CUresult cuCtxGetDevice(CUdevice* d) { *d = 0; return 0; }
inline CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute, CUdevice) { *v = 232448; return 0; }
inline CUresult cuModuleLoadData(CUmodule* m, const void*) { *m = nullptr; return 0; }
inline CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  *f = new CUfunc_st{name}; return 0; }
inline CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return 0; }
inline CUresult cuOccupancyMaxActiveClusters(int* n, CUfunction, const CUlaunchConfig*) {
  *n = oracle_stub::g_max_active_clusters; return 0; }
inline CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction f, void**, void**) {
  oracle_stub::g_launched = f->name; return 0; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return 0; }
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = *t = 0; return 0; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? oracle_stub::g_sm / 10
     : a == cudaDevAttrComputeCapabilityMinor ? oracle_stub::g_sm % 10 : 148; return 0; }
"""

STUBS = {
    "sys/oracle_stub_state.h": STUB_STATE,
    "sys/cuda.h": _CUDA_H,
    "sys/cuda_runtime.h": '#pragma once\n#include "cuda.h"\n',
    "sys/cuda_runtime_api.h": '#pragma once\n#include "cuda.h"\n',
    "sys/cuda_fp16.h": '#pragma once\nstruct __half { unsigned short x; };\n',
    "sys/cuda_bf16.h": '#pragma once\nstruct __nv_bfloat16 { unsigned short x; };\n',
    "sys/cuda_fp8.h": '#pragma once\n#include "cuda_fp16.h"\n#include "cuda_bf16.h"\n'
                      'struct __nv_fp8_e4m3 { unsigned char x; };\nstruct __nv_fp8_e5m2 { unsigned char x; };\n',
    "sys/cuda/std/cfloat": '#pragma once\n#include <cfloat>\n',
    "shadow/flashinfer/utils.cuh": r"""
#pragma once
#include "cuda_runtime.h"
#include "exception.h"
#define STR_HELPER(x) #x
#define STR(x) STR_HELPER(x)
#define FLASHINFER_CUDA_CHECK(func) do { cudaError_t e = (func); \
  FLASHINFER_CHECK(e == cudaSuccess, "CUDA Error"); } while (0)
namespace flashinfer {
template <typename T1, typename T2>
constexpr T1 ceil_div(const T1 x, const T2 y) noexcept { return (x + y - 1) / y; }
template <typename T1, typename T2>
constexpr T1 round_up(const T1 x, const T2 y) noexcept { return ceil_div(x, y) * y; }
inline int UpPowerOfTwo(int x) {
  if (x <= 0) return 1;
  --x; x |= x >> 1; x |= x >> 2; x |= x >> 4; x |= x >> 8; x |= x >> 16;
  return x + 1;
}
}  // namespace flashinfer
""",
    "shadow/flashinfer/trtllm/fmha/kernelParams.h": r"""
#pragma once
#include "../../utils.cuh"
#include "../common.h"
#include "fmhaRunnerParams.h"
struct KernelParams {
  const float* ptrSageAttnSfsQ; const float* ptrSageAttnSfsK;
  const float* ptrSageAttnSfsP; const float* ptrSageAttnSfsV;
  int mLogNumEltsPerSageAttnBlkQ, mLogNumEltsPerSageAttnBlkK, mLogNumEltsPerSageAttnBlkP,
      mLogNumEltsPerSageAttnBlkV;
  template <typename Options, typename Meta>
  static KernelParams setKernelParams(Options const&, Meta const&, int, int) { return KernelParams{}; }
};
""",
    "shadow/flashinfer/trtllm/fmha/fmhaReduction.h": r"""
#pragma once
#include "flashInferMetaInfo.h"
#include "fmhaRunnerParams.h"
#include "kernelParams.h"
namespace tensorrt_llm::kernels {
inline void runFmhaReduction(TllmGenFmhaKernelMetaInfo const&, KernelParams const&, int32_t, bool,
                             cudaStream_t) {}
}
""",
    "shadow/flashinfer/trtllm/fmha/lse.cuh": r"""
#pragma once
#include "../../utils.cuh"
namespace flashinfer {
template <typename... A> inline cudaError_t ComputeLSEFromMD(A...) { return cudaSuccess; }
}
""",
}

# FlashInfer's files compiled verbatim (relative to data/include/flashinfer).
VERBATIM = ("exception.h", "trtllm/common.h", "trtllm/fmha/fmhaKernels.cuh", "trtllm/fmha/fmhaRunner.cuh",
            "trtllm/fmha/fmhaRunnerParams.h")

_CTYPES = {"mCubin": "const unsigned char*", "mCubinSize": "unsigned int", "mFuncName": "const char*",
           "sha256": "const char*"}
_DT = {"mDataTypeQ", "mDataTypeKv", "mDataTypeK", "mDataTypeV", "mDataTypeO"}
_BOOL = {"mGroupsHeadsQ", "mGroupsTokensHeadsQ", "mReuseSmemKForV", "m2CtaMma", "mSkipsSoftmaxWhenPossible",
         "mReserved1", "mReserved2", "mEnablesBf16QFp8KvKOnlyTransform", "mSeparateTransformedKv", "mFp16Softmax",
         "mUsesSpcompress", "mFusesDsv4InvRopeFp8Quant", "mUsesDsv4Ue8m0ScaleO"}
_SM_NAME = {sm_constant(n): n for n in ("kSM_100", "kSM_100f", "kSM_103", "kSM_107")}


def meta_info_header(table: KernelTable, extra_fields: Iterable[str] = ()) -> str:
    """flashInferMetaInfo.h for ``table``: FlashInfer's struct (the table's own field order) plus
    ``extra_fields`` a newer selection code reads (zero / false: the 0.6 table predates them)."""
    fields = list(table.struct_fields) + [f for f in extra_fields if f not in table.struct_fields]
    decl = []
    for f in fields:
        t = _CTYPES.get(f) or ("Data_type" if f in _DT else "bool" if f in _BOOL else "int")
        decl.append(f"    {t} {f};")
    rows = []
    for r in table.rows:
        vals = []
        for f in fields:
            v = r.get(f)
            if f in ("mCubin",):
                vals.append("nullptr")
            elif f == "mCubinSize":
                vals.append("0")
            elif f in _DT:
                vals.append(f"DATA_TYPE_{v}")
            elif f == "mSM":
                vals.append(_SM_NAME.get(v, str(v)))
            elif f in ("mFuncName", "sha256"):
                vals.append(f'"{v}"')
            elif f in _BOOL:
                vals.append("true" if v else "false")
            else:
                vals.append(str(int(v or 0)))
        rows.append("{ " + ", ".join(vals) + " }")
    return ("#pragma once\n#include <flashinfer/trtllm/fmha/kernelParams.h>\n"
            "namespace tensorrt_llm { namespace kernels {\n"
            "struct TllmGenFmhaKernelMetaInfo {\n" + "\n".join(decl) + "\n};\n"
            "static const TllmGenFmhaKernelMetaInfo sTllmGenFmhaKernelMetaInfos[] = {\n"
            + ",\n".join(rows) + "\n};\n}}\n")


def installed_include() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        raise SourceNotFoundError("flashinfer is not installed; pass --include")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "include"


def resolve_include(path: Path) -> Path:
    """``path`` itself when it is a flashinfer/data/include, else the one under it (an unzipped wheel or a
    site-packages dir); SourceNotFoundError naming what is missing."""
    for cand in (path, path / "data" / "include", path / "flashinfer" / "data" / "include"):
        if (cand / "flashinfer" / "trtllm" / "fmha" / "fmhaKernels.cuh").is_file():
            return cand
    raise SourceNotFoundError(f"no flashinfer/trtllm/fmha/fmhaKernels.cuh under {path} (pass a flashinfer wheel's "
                              "flashinfer/data/include, or the directory it was unzipped into)")


def code_version(include: Path) -> str:
    """The flashinfer version whose headers these are (the wheel's flashinfer/version.py or _build_meta)."""
    pkg = include.parent.parent
    for name in ("_build_meta.py", "version.py"):
        p = pkg / name
        if p.exists():
            for line in p.read_text().splitlines():
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("\"'")
    return "unknown"


def build(include: Path, table: KernelTable, workdir: Path, meta_info: Optional[Path] = None,
          extra_fields: Iterable[str] = ()) -> Path:
    """Compile the harness against FlashInfer's headers in ``include``; returns the binary.
    Cached by the content of everything that goes in."""
    if shutil.which("g++") is None:
        raise SetupError("g++ is not installed")
    src = {f: (include / "flashinfer" / f).read_text() for f in VERBATIM}
    if "mFp16Softmax" in src["trtllm/fmha/fmhaKernels.cuh"]:
        extra_fields = list(extra_fields) + ["mEnablesBf16QFp8KvKOnlyTransform", "mSeparateTransformedKv",
                                             "mFp16Softmax", "mUsesSpcompress", "mFusesDsv4InvRopeFp8Quant",
                                             "mUsesDsv4Ue8m0ScaleO"]
    header = meta_info.read_text() if meta_info else meta_info_header(table, extra_fields)
    h = hashlib.sha256()
    for k in sorted(src):
        h.update(k.encode() + src[k].encode())
    for k in sorted(STUBS):
        h.update(k.encode() + STUBS[k].encode())
    h.update(header.encode() + HARNESS.read_bytes())
    out = workdir / f"trtllm_gen_oracle_{h.hexdigest()[:16]}"
    if out.exists():
        return out
    tree = workdir / f"tree_{h.hexdigest()[:16]}"
    for rel, text in STUBS.items():
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for rel, text in src.items():
        p = tree / "shadow" / "flashinfer" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tree / "shadow/flashinfer/trtllm/fmha/flashInferMetaInfo.h").write_text(header)
    defines = ["-DORACLE_HAS_BF16Q=1"] if "mBf16QFp8KvTransformMode" in src["trtllm/fmha/fmhaRunnerParams.h"] else []
    cmd = ["g++", "-std=c++17", "-O1", "-w", *defines, "-DTLLM_GEN_FMHA_CUBIN_PATH=\"oracle\"",
           "-DTLLM_GEN_FMHA_METAINFO_HASH=\"oracle\"", f"-I{tree / 'sys'}", f"-I{tree / 'shadow'}",
           f"-I{tree / 'shadow' / 'flashinfer' / 'trtllm' / 'fmha'}", str(HARNESS), "-o", str(out) + ".tmp"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SetupError("the oracle harness did not compile:\n" + r.stderr[-6000:])
    os.replace(str(out) + ".tmp", out)
    return out


# ---------------------------------------------------------------------------------------------
# cases

DT = {n: i for i, n in enumerate(DATA_TYPES)}


@dataclass(frozen=True)
class Query:
    mode: int          # 0 paged context, 1 paged decode, 2 ragged
    sm: int
    dtype_q: str
    dtype_kv: str
    dtype_o: str
    head_dim_qk: int
    head_dim_v: int
    page_size: int
    num_heads_q: int
    num_heads_kv: int
    batch: int
    max_q_len: int
    max_kv_len: int
    sm_count: int
    window_left: int = -1
    sparse_top_k: int = 0
    skips_softmax: bool = False
    causal: bool = True
    max_active_clusters: int = 1 << 20
    bf16q_mode: int = 0   # 0.7 decode: flashinfer.decode's default is separate_kv (2) for bf16 Q, e4m3 KV, bf16 out

    def line(self) -> str:
        return " ".join(str(x) for x in (
            self.mode, self.sm, DT[self.dtype_q], DT[self.dtype_kv], DT[self.dtype_o], self.head_dim_qk,
            self.head_dim_v, self.page_size, self.num_heads_q, self.num_heads_kv, self.batch, self.max_q_len,
            self.max_kv_len, self.sm_count, self.window_left, self.sparse_top_k, int(self.skips_softmax),
            int(self.causal), self.max_active_clusters, self.bf16q_mode))


_DTYPES_Q = ("BF16", "FP16", "E4M3", "E5M2")
_DTYPES_KV = ("BF16", "FP16", "E4M3", "E5M2", "E2M1")
_DTYPES_O = ("BF16", "FP16", "E4M3", "E2M1")
# (query, KV cache, output) as serving engines call trtllm-gen: 16-bit throughout, fp8 KV with a 16-bit or
# fp8 query, fp8 output (vLLM's fused output quant), NVFP4 KV (fp8 query, fp8 output), NVFP4 output.
_SERVING_DTYPES = (("BF16", "BF16", "BF16"), ("FP16", "FP16", "FP16"), ("BF16", "E4M3", "BF16"),
                   ("E4M3", "E4M3", "BF16"), ("E4M3", "E4M3", "E4M3"), ("E4M3", "E4M3", "FP16"),
                   ("FP16", "E4M3", "FP16"), ("E4M3", "E2M1", "E4M3"), ("E4M3", "E2M1", "BF16"),
                   ("BF16", "E2M1", "BF16"), ("E4M3", "E4M3", "E2M1"), ("BF16", "BF16", "E4M3"),
                   ("BF16", "E5M2", "BF16"), ("E5M2", "E5M2", "BF16"))
_HEADS = (64, 72, 80, 96, 128, 160, 192, 256, 320, 512)
_COMMON_HEADS = (64, 128, 128, 128, 256, 256, 512)
# (qk, vo): DeepSeek MLA decode (576/512), its 320/256 variant, the MLA ragged prefill (192/128) and others
_MLA = ((576, 512), (320, 256), (192, 128), (192, 192), (128, 128))
_PAGES = (16, 32, 64, 128, 256, 512, 1024)
_GROUPS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128)
_COMMON_GROUPS = (1, 2, 4, 5, 6, 8, 8, 16, 32, 64, 128)


_SPARSE_TOP_K = (64, 128, 512, 2048)
_SPARSE_SHAPES = ((576, 512), (576, 512), (512, 512), (320, 256))


def generate(n: int, seed: int, sms: tuple[int, ...] = (100, 100, 103, 103, 107), sparse: float = 0.15) -> list[Query]:
    """Seeded configurations: SM 10.0/10.3/10.7, every query/KV/output dtype (fp8 e4m3/e5m2, NVFP4), head
    dims 64-512 and MLA shapes, pages 16-1024, GQA groups 1-128, decode q_len 1-4, window, sinks-free and
    skip-softmax calls, batch 1-256, KV 1-128k, SM counts 20-160, and both outcomes of the CGA occupancy query.
    A ``sparse`` share of the decode calls become sparse-MLA decode (top-k 64-2048, MLA shapes and 512/512,
    MLA groups 1-128): drawn from a second generator, so the other configurations of a seed stay as they were."""
    rng = random.Random(seed)
    rs = random.Random(seed * 1000003 + 17)
    out = []
    for _ in range(n):
        mode = rng.choice((0, 1, 1, 2))
        if rng.random() < 0.25:
            hqk, hv = rng.choice(_MLA)
        else:
            hqk = hv = rng.choice(_COMMON_HEADS if rng.random() < 0.6 else _HEADS)
        if rng.random() < 0.7:
            q, kv, o = rng.choice(_SERVING_DTYPES)
        else:
            q, kv, o = rng.choice(_DTYPES_Q), rng.choice(_DTYPES_KV), rng.choice(_DTYPES_O)
        group = rng.choice(_COMMON_GROUPS if rng.random() < 0.6 else _GROUPS)
        bf16q = 0
        if mode == 1 and (q, kv, o) == ("BF16", "E4M3", "BF16"):
            bf16q = rng.choice((2, 2, 1, 0))   # trtllm_batch_decode_with_kv_cache's default, and the others
        hkv = 1 if (hqk, hv) in ((576, 512), (320, 256)) else rng.choice((1, 1, 2, 4, 8))
        out.append(Query(
            mode=mode, sm=rng.choice(sms), dtype_q=q, dtype_kv=kv, dtype_o=o, head_dim_qk=hqk, head_dim_v=hv,
            page_size=rng.choice(_PAGES), num_heads_q=group * hkv, num_heads_kv=hkv,
            batch=rng.choice((1, 2, 4, 8, 16, 32, 64, 128, 256)), max_q_len=rng.choice((1, 1, 2, 3, 4))
            if mode == 1 else rng.choice((1, 16, 128, 1024, 4096)),
            max_kv_len=rng.choice((1, 16, 100, 512, 2048, 8192, 32768, 131072)),
            sm_count=rng.choice((148, 148, 160, 132, 20)),
            window_left=rng.choice((-1, -1, -1, 127, 4095)),
            sparse_top_k=0, skips_softmax=rng.random() < 0.1, causal=rng.random() < 0.8,
            max_active_clusters=rng.choice((1 << 20, 1 << 20, 0)), bf16q_mode=bf16q))
        if mode == 1 and rs.random() < sparse:
            # selectSparseMlaGenerationKernel: head tile from the group (halved at batch 1 for short queries,
            # padded for groups that cannot be their own tile), split-KV over min(KV, top-k)
            hqk, hv = rs.choice(_SPARSE_SHAPES)
            out[-1] = replace(out[-1], head_dim_qk=hqk, head_dim_v=hv, num_heads_kv=1,
                              num_heads_q=rs.choice(_GROUPS), sparse_top_k=rs.choice(_SPARSE_TOP_K),
                              batch=rs.choice((1, 1, 2, 4, 16, 64)), max_q_len=rs.choice((1, 1, 2, 4, 17, 32)))
    return out


def run_oracle(binary: Path, queries: list[Query]) -> list[str]:
    r = subprocess.run([str(binary)], input="\n".join(q.line() for q in queries) + "\n",
                       capture_output=True, text=True, check=True)
    # flashinfer::Error reads "Error in function 'F' at <file>:<line>: message": the file is this build's
    # tree, so the comparison keeps function and message.
    lines = [re.sub(r"^ERR Error in function '(\w+)' at \S+:\d+: ", r"ERR \1: ", ln) for ln in r.stdout.splitlines()]
    if len(lines) != len(queries):
        raise SetupError(f"the harness answered {len(lines)} of {len(queries)} queries:\n{r.stderr[-2000:]}")
    return lines


def port_line(q: Query, table: KernelTable, version: str) -> str:
    from ..kernels.trtllm_gen import select as port
    return port.oracle_line(q, table, version)


def compare(binary: Path, queries: list[Query], table: KernelTable, version: str):
    truth = run_oracle(binary, queries)
    agree = 0
    diffs = []
    for q, t in zip(queries, truth):
        got = port_line(q, table, version)
        if got == t:
            agree += 1
        else:
            diffs.append((q, t, got))
    return agree, diffs, truth


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--include", "--flashinfer-include", dest="include", type=Path, default=None,
                    help="a flashinfer wheel's flashinfer/data/include, or the directory the wheel was unzipped "
                         "into (default: the installed flashinfer)")
    ap.add_argument("--release", "--code-version", dest="release", default=None,
                    help="the flashinfer release of those headers, whose selection code the port runs "
                         "(default: read from the headers' package)")
    ap.add_argument("--meta-info", type=Path, default=None,
                    help="compile this flashInferMetaInfo.h instead of one regenerated from the shipped table")
    ap.add_argument("--configs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "attnplan-trtllm-oracle")
    args = ap.parse_args(argv)
    from ..kernels.trtllm_gen.select import code_of

    include = resolve_include(args.include) if args.include else installed_include()
    read = code_version(include)
    version = args.release or read
    code = code_of(version)
    if code is None:
        ap.error(f"no known trtllm-gen selection code for flashinfer {version}")
    if read != "unknown" and code_of(read) != code:
        ap.error(f"the headers in {include} are flashinfer {read}'s (code {code_of(read)}), "
                 f"not {version}'s ({code})")
    table = shipped()
    args.workdir.mkdir(parents=True, exist_ok=True)
    binary = build(include, table, args.workdir, args.meta_info)
    queries = generate(args.configs, args.seed)
    agree, diffs, truth = compare(binary, queries, table, version)
    outcomes = {"OK": 0, "MISS": 0, "ERR": 0}
    for t in truth:
        outcomes[t.split(" ", 1)[0]] += 1
    summary = {"flashinfer_code": version, "selection_code": code, "include": str(include), "table": table.pin,
               "configs": len(queries), "seed": args.seed,
               "agree": agree, "disagree": len(diffs), "oracle_outcomes": outcomes}
    if args.json:
        print(json.dumps(summary | {"diffs": [(q.line(), t, g) for q, t, g in diffs[: args.show]]}, indent=1))
    else:
        print(f"flashinfer {version} selection code (port: {code}) over table {table.short_pin}: "
              f"{agree}/{len(queries)} agree "
              f"({100.0 * agree / max(1, len(queries)):.3f} %); oracle outcomes {outcomes}")
        for q, t, g in diffs[: args.show]:
            print(f"  {q}\n    flashinfer: {t}\n    attnplan:   {g}")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())

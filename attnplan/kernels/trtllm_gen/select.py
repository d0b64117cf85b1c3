"""A port of FlashInfer's host-side trtllm-gen FMHA kernel selection, over a kernel table.

Mirrors, function for function, ``include/flashinfer/trtllm/fmha/fmhaKernels.cuh`` (class
TllmGenFmhaKernel: loadKernels, hashID, selectKernel and its generation heuristics, hashFromRunnerParams,
loadKernel, computeCtaAndClusterConfig, run's re-selection loop and CGA fallback), ``fmhaRunner.cuh``
(TllmGenFmhaRunner's architecture and dtype checks), ``fmhaRunnerParams.h`` (TllmGenSelectKernelParams'
defaults) and ``csrc/trtllm_fmha_kernel_launcher.cu`` (the runner params trtllm_paged_attention_launcher
and trtllm_ragged_attention_launcher set, and their "Missing TRTLLM-GEN kernel" check), for each release
family whose selection code differs (``CODES``; ``code_of`` maps a version to one):

* ``"0.6.13"`` (0.6.12-0.6.17): artifact pin 158f6fa1, the table it was built with;
* ``"0.6.18"``, ``"0.7.0"``, ``"0.7.1"`` (0.7.1 and 0.7.2: identical headers), ``"0.7.2.post1"``: pin 2d6a5a02,
  whose table is not public: run them over a node's table, or over 0.6.13's as evidence of their logic.
  ``Code`` names each difference, with the header and function it comes from; the old names ``"0.6"`` and
  ``"0.7"`` stay aliases of 0.6.13 and 0.7.2.post1.

Held to FlashInfer's own code by the differential oracle (attnplan/oracle/trtllm_gen.py) (the headers compiled with g++), which
compares ``oracle_line`` with the harness' answer line for line. Pure: no torch, no CUDA.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from attnplan.errors import InvalidInputError

from .table import KernelTable, sm_constant

INT_MAX = 2**31 - 1
FLT_MAX = 3.4028234663852886e38

# Data_type names (common.h toStr)
BF16, FP16, E4M3, E5M2, E2M1, INT8 = "BF16", "FP16", "E4M3", "E5M2", "E2M1", "INT8"

# enums (fmhaRunnerParams.h)
DENSE, CAUSAL, SLIDING, CUSTOM = 0, 1, 2, 3                            # TrtllmGenAttentionMaskType
CONTEXT, GENERATION, SWAPS_AB, KEEPS_AB, SPEC_DEC = 0, 1, 2, 3, 4      # FmhaKernelType
SEPARATE_QKV, PACKED_QKV, PAGED_KV, CONTIGUOUS_KV = 0, 1, 2, 3          # QkvLayout
STATIC, PERSISTENT = 0, 1                                              # TileScheduler
DISABLED, GMEM, GMEM_SEP, CGA = 0, 1, 2, 3                              # MultiCtasKvMode
SM100, SM100F, SM103, SM107 = (sm_constant(n) for n in ("kSM_100", "kSM_100f", "kSM_103", "kSM_107"))
BF16Q_FULL, BF16Q_KONLY, BF16Q_SEPARATE = 0, 1, 2                      # Bf16QFp8KvTransformMode

SMEM_OPTIN_BYTES = 232448   # cudaDevAttrMaxSharedMemoryPerBlockOptin on SM100/SM103 (227 KiB)


@dataclass(frozen=True)
class Code:
    """One release family's selection code: the switches by which its headers differ (each names where)."""
    name: str
    # 0.6.18+ (fmhaKernels.cuh/fmhaRunner.cuh of 0.6.18 vs 0.6.13): SM 10.7 family, the shared-memory filter in
    # loadKernels, the 0.7 hashID layout with bf16-query/e4m3-KV transform modes, grouped MLA generation,
    # getPaddedMlaTileSizeQ, the GQA trait sync, dynamic tokens per page for one head per KV head.
    v7: bool
    # 0.7.0+ (fmhaKernels.cuh 0.7.0 vs 0.6.18): the DSv4 fused inverse-RoPE FP8 branch of selectKernel, hashID
    # bits 57-58 (fusesDsv4InvRopeFp8Quant, usesDsv4Ue8m0ScaleO) and their two fields in the kernel-traits info.
    dsv4: bool = False
    # 0.7.0+ computeCtaAndClusterConfig: useMlaH512Cga (CGA reduction for the H576/V512 split-V one-token decode).
    mla_h512_cga: bool = False
    # 0.7.0+ selectSparseMlaGenerationKernel: the half tileSizeQ only for maxSeqLenQ <= 16.
    sparse_half_tile_short_q: bool = False
    # 0.7.1+ getPaddedMlaTileSizeQ: power-of-two groups below 8 heads are padded too (0.6.18/0.7.0: only
    # non-power-of-two groups, `if (numHeadsQPerKv >= 128 || (numHeadsQPerKv & (numHeadsQPerKv - 1)) == 0)`).
    pads_small_mla_groups: bool = False
    # 0.7.2.post1 computeCtaAndClusterConfig: ">16 splits -> 16" (kMaxCgaSmemReductionCtasPerSeqKv) clamp.
    cga_clamp: bool = False


CODES = {
    "0.6.13": Code("0.6.13", v7=False),
    "0.6.18": Code("0.6.18", v7=True),
    "0.7.0": Code("0.7.0", v7=True, dsv4=True, mla_h512_cga=True, sparse_half_tile_short_q=True),
    "0.7.1": Code("0.7.1", v7=True, dsv4=True, mla_h512_cga=True, sparse_half_tile_short_q=True,
                  pads_small_mla_groups=True),
    "0.7.2.post1": Code("0.7.2.post1", v7=True, dsv4=True, mla_h512_cga=True, sparse_half_tile_short_q=True,
                        pads_small_mla_groups=True, cga_clamp=True),
}
ALIASES = {"0.6": "0.6.13", "0.7": "0.7.2.post1"}

# flashinfer-python releases per code: [lowest, below). Each range's headers (common.h, fmhaKernels.cuh,
# fmhaRunner.cuh, fmhaRunnerParams.h, csrc/trtllm_fmha_kernel_launcher.cu) are byte-identical to the named
# release's (compared wheel by wheel: 0.6.18 = 0.6.18.post1, 0.7.0 = 0.7.0.post1, 0.7.1 = 0.7.2); a version
# outside every range has no known code.
RELEASES = (("0.6.12", "0.6.18", "0.6.13"), ("0.6.18", "0.6.19", "0.6.18"), ("0.7.0", "0.7.1", "0.7.0"),
            ("0.7.1", "0.7.2.post1", "0.7.1"), ("0.7.2.post1", "0.7.2.post2", "0.7.2.post1"))


def resolve(code: "str | Code") -> Code:
    """The Code named ``code`` (a CODES key or an alias)."""
    if isinstance(code, Code):
        return code
    name = ALIASES.get(code, code)
    if name not in CODES:
        raise InvalidInputError("flashinfer_version", f"unknown trtllm-gen selection code {code!r}", list(CODES))
    return CODES[name]


@functools.lru_cache(maxsize=256)   # read for every candidate of every plan: parse each version once
def code_of(version: str) -> Optional[str]:
    """The selection code (a CODES key) flashinfer ``version`` runs, or None when no known code is its."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(str(version))
    except InvalidVersion:
        return None
    if v.is_prerelease or v.is_devrelease:
        return None
    v = Version(v.public.split("+")[0])
    for lo, hi, name in RELEASES:
        if Version(lo) <= v < Version(hi):
            return name
    return None


class FlashInferError(Exception):
    """What FlashInfer's FLASHINFER_CHECK / FLASHINFER_ERROR would throw: ``function`` and ``message``
    as flashinfer::Error formats them ("Error in function 'F' at file:line: message")."""

    def __init__(self, function: str, message: str):
        self.function = function
        self.message = message
        super().__init__(f"{function}: {message}")


def _check(cond: bool, function: str, message: str) -> None:
    if not cond:
        raise FlashInferError(function, message)


def _is_generation(kt: int) -> bool:   # isGenerationKernel: exactly FmhaKernelType::Generation
    return kt == GENERATION


@dataclass
class RunnerParams:
    """The TllmGenFmhaRunnerParams fields selection reads (the launcher leaves the rest zero)."""
    kernel_type: int
    mask_type: int
    qkv_layout: int
    tile_scheduler: int
    multi_ctas_kv: bool
    head_dim_qk: int
    head_dim_v: int
    num_heads_q: int
    num_heads_kv: int
    batch: int
    max_seq_len_q: int
    max_seq_len_kv: int
    tokens_per_page: int
    sm_count: int
    window_size: int = INT_MAX          # mAttentionWindowSize (window_left + 1)
    chunked_size: int = INT_MAX         # mChunkedAttentionSize
    sparse_mla_type: int = 0
    sparse_mla_top_k: int = 0
    skips_softmax: bool = False
    bf16q_fp8kv_mode: int = BF16Q_FULL  # 0.7
    fp16_softmax: bool = False          # 0.7
    uses_spcompress: bool = False       # 0.7
    fuses_dsv4: bool = False            # 0.7

    @property
    def heads_per_kv(self) -> int:
        return self.num_heads_q // self.num_heads_kv


@dataclass
class SelectParams:
    kernel_type: int
    head_dim_per_cta_v: int
    multi_ctas_kv_mode: int
    force_gmem: bool
    mask_type: int
    tokens_per_page: int
    dynamic_tokens_per_page: bool
    reuse_smem_k_for_v: bool
    select_new: bool
    skips_softmax: bool
    tile_scheduler: int
    tile_q: int
    tile_kv: int
    two_cta: bool
    groups_tokens_heads_q: bool = False   # 0.7
    bf16q_mode: int = 0                   # 0.7
    fp16_softmax: bool = False            # 0.7
    spcompress: bool = False              # 0.7
    dsv4: bool = False                    # 0.7

    @classmethod
    def of(cls, p: RunnerParams) -> "SelectParams":   # TllmGenSelectKernelParams(params)
        return cls(kernel_type=p.kernel_type, head_dim_per_cta_v=p.head_dim_v,
                   multi_ctas_kv_mode=GMEM if p.multi_ctas_kv else DISABLED, force_gmem=False,
                   mask_type=p.mask_type, tokens_per_page=p.tokens_per_page, dynamic_tokens_per_page=False,
                   reuse_smem_k_for_v=False, select_new=False, skips_softmax=p.skips_softmax,
                   tile_scheduler=p.tile_scheduler, tile_q=128, tile_kv=128, two_cta=False,
                   groups_tokens_heads_q=False, bf16q_mode=p.bf16q_fp8kv_mode, fp16_softmax=p.fp16_softmax,
                   spcompress=p.uses_spcompress, dsv4=p.fuses_dsv4)


_SELECT_FIELDS = tuple(SelectParams.__dataclass_fields__)


def _copy(obj: Any) -> Any:
    """A field-for-field copy of a plain dataclass instance (dataclasses.replace without __init__)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


@dataclass
class Cta:
    max_ctas_q: int = 0
    max_ctas_kv: int = 0
    x: int = 0
    y: int = 0
    z: int = 0
    cluster_x: int = 0


def _log2_int(x: int) -> int:
    return int(math.log2(x))


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def _c_div(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero)."""
    if a >= 0 and b > 0:   # floor and truncation agree
        return a // b
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _i32(x: int) -> int:
    """int32_t wrap-around, as the C++ int arithmetic the selection does."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _up_pow2(x: int) -> int:
    if x <= 0:
        return 1
    return 1 << (x - 1).bit_length()


def _f32(x: float) -> float:
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]


class KernelFamily:
    """TllmGenFmhaKernel for one (SM, dtypeQ, dtypeK, dtypeV, dtypeO): the loaded hash map over a table."""

    def __init__(self, table: KernelTable, sm: int, dq: str, dk: str, dv: str, do: str, code: "str | Code"):
        self.c = resolve(code)
        self.table, self.sm, self.code = table, sm, self.c.name
        self.dq, self.dk, self.dv, self.do = dq, dk, dv, do
        self.v7 = self.c.v7
        self.map: dict[int, int] = {}
        self._load_kernels()

    # -- family and hash ------------------------------------------------------------------------------
    def _sm_compatible(self, gpu: int, kern: int) -> bool:
        if gpu == SM103:
            return kern in (SM100F, SM103)
        if self.v7 and gpu == SM107:
            return kern in (SM100F, SM107)
        if gpu == SM100:
            return kern in (SM100F, SM100)
        return gpu == kern

    def _family_pair(self, a: int, b: int) -> bool:
        specific = (SM100, SM103, SM107) if self.v7 else (SM100, SM103)
        return (a == SM100F and b in specific) or (b == SM100F and a in specific)

    def _load_kernels(self) -> None:
        rows = self.table.rows
        # the rows of this family's dtypes (an index built once per table): loadKernels' other rows fail its
        # dtype test, so skipping them changes nothing but the time
        for i in _dtype_index(self.table).get((self.dq, self.dk, self.dv, self.do), ()):
            r = rows[i]
            if self.v7 and r["mSharedMemBytes"] + 1024 > SMEM_OPTIN_BYTES:
                continue
            if not (self._sm_compatible(self.sm, r["mSM"]) and r["mDataTypeQ"] == self.dq
                    and r["mDataTypeK"] == self.dk and r["mDataTypeV"] == self.dv and r["mDataTypeO"] == self.do
                    and r["mNumEltsPerSageAttnBlkQ"] == 0 and r["mNumEltsPerSageAttnBlkK"] == 0
                    and r["mNumEltsPerSageAttnBlkP"] == 0 and r["mNumEltsPerSageAttnBlkV"] == 0):
                continue
            h = self._hash_meta(r)
            if h in self.map:
                ex = rows[self.map[h]]
                _check(self._family_pair(ex["mSM"], r["mSM"]), "loadKernels",
                       f"Hash conflicts exist between %s and %s. {ex['mFuncName']} {r['mFuncName']}")
                if ex["mSM"] == SM100F:
                    self.map[h] = i
            else:
                self.map[h] = i

    def _hash(self, layout, mask, ktype, sched, mcta, hpcv, hqk, hv, tq, tkv, page, dyn, reuse, two_cta,
              sparse, skips, groups_th=False, bf16q=0, two_q_sw=False, fp16sm=False, spc=False, dsv4=False,
              ue8m0=False) -> int:
        fn = "hashID"
        # FlashInfer's checks, each message built only on a failure: hashID runs for every serving shape
        if not (32 <= hpcv <= 1024 and 32 <= hqk <= 1024 and 32 <= hv <= 1024):
            raise FlashInferError(fn, f"Expect (32 <= headDim <= 1024), got headDimPerCtaV=%d, headDimQk=%d, headDimV=%d {hpcv} {hqk} {hv}")
        if not (page == 0 or (page & (page - 1)) == 0):
            raise FlashInferError(fn, "The numTokensPerPage must be 0 or power of 2.")
        if not (tq <= 128 and tkv <= 128):
            raise FlashInferError(fn, "The tileSizeQ and tileSizeKv must be <= 128.")
        if not ((tq & (tq - 1)) == 0 and (tkv & (tkv - 1)) == 0):
            raise FlashInferError(fn, "The tileSizeQ and tileSizeKv must be power of 2.")
        if not (tkv in (64, 128)):
            raise FlashInferError(fn, "The tileSizeKv must be 64 or 128.")
        if not (0 <= sparse <= 3):
            raise FlashInferError(fn, "The sparse MLA type must fit in 2 bits.")
        page_log2 = 0 if page == 0 else _log2_int(page)
        if not self.v7:
            return (layout | mask << 4 | ktype << 8 | sched << 12 | mcta << 16 | (hpcv >> 3) << 18
                    | (hqk >> 3) << 26 | (hv >> 3) << 34 | (tkv >> 6) << 42 | page_log2 << 44
                    | _log2_int(tq) << 49 | int(reuse) << 53 | int(two_cta) << 54 | sparse << 55
                    | int(skips) << 57 | int(dyn) << 58)
        if not (0 <= bf16q <= 2):
            raise FlashInferError(fn, "The BF16Q FP8KV transform mode must fit in 2 bits.")
        if self.c.dsv4 and not (not ue8m0 or dsv4):
            raise FlashInferError(fn, "DSv4 UE8M0 output scales require the fused inverse-RoPE FP8 epilogue.")
        if not (0 <= layout < 4 and 0 <= mask < 8 and 0 <= ktype < 8 and 0 <= sched < 4 and 0 <= mcta < 4
               and page_log2 < 16):
            raise FlashInferError(fn, "Kernel attribute out of range for the hash key: qkvLayout=%d, maskType=%d, kernelType=%d, "
               "tileScheduler=%d, multiCtasKvMode=%d, bf16QFp8KvTransformMode=%d, numTokensPerPage=%d "
               f"{layout} {mask} {ktype} {sched} {mcta} {bf16q} {page}")
        return (layout | mask << 2 | ktype << 5 | sched << 8 | mcta << 10 | (hpcv >> 3) << 12
                | (hqk >> 3) << 20 | (hv >> 3) << 28 | (tkv >> 6) << 36 | page_log2 << 38
                | _log2_int(tq) << 42 | int(reuse) << 45 | int(two_cta) << 46 | sparse << 47 | int(skips) << 49
                | int(dyn) << 50 | bf16q << 51 | int(groups_th) << 53 | int(two_q_sw) << 54 | int(fp16sm) << 55
                | int(spc) << 56 | int(dsv4) << 57 | int(ue8m0) << 58)

    def _hash_meta(self, r: dict[str, Any]) -> int:
        dyn = r["mNumTokensPerPage"] == 128 and "P128" not in r["mFuncName"]
        if not self.v7:
            return self._hash(r["mQkvLayout"], r["mMaskType"], r["mKernelType"], r["mTileScheduler"],
                              r["mMultiCtasKvMode"], r["mHeadDimPerCtaV"], r["mHeadDimQk"], r["mHeadDimV"],
                              r["mTileSizeQ"], r["mTileSizeKv"], r["mNumTokensPerPage"], dyn, r["mReuseSmemKForV"],
                              r["m2CtaMma"], r["mSparseAttn"], r["mSkipsSoftmaxWhenPossible"])
        konly = bool(r.get("mEnablesBf16QFp8KvKOnlyTransform", False))
        sep = bool(r.get("mSeparateTransformedKv", False))
        _check(not (konly and sep), "getBf16QFp8KvTransformMode",
               "BF16Q FP8KV transform mode cannot be both K-only and separate K/V.")
        bf16q = BF16Q_KONLY if konly else BF16Q_SEPARATE if sep else BF16Q_FULL
        two_q = r["mKernelType"] == KEEPS_AB and r["mGroupsTokensHeadsQ"] and r["mStepQ"] == 2 * r["mTileSizeQ"]
        return self._hash(r["mQkvLayout"], r["mMaskType"], r["mKernelType"], r["mTileScheduler"],
                          r["mMultiCtasKvMode"], r["mHeadDimPerCtaV"], r["mHeadDimQk"], r["mHeadDimV"],
                          r["mTileSizeQ"], r["mTileSizeKv"], r["mNumTokensPerPage"], dyn, r["mReuseSmemKForV"],
                          r["m2CtaMma"], r["mSparseAttn"], r["mSkipsSoftmaxWhenPossible"],
                          r["mGroupsTokensHeadsQ"], bf16q, two_q, r.get("mFp16Softmax", False),
                          r.get("mUsesSpcompress", False),
                          # 0.6.18's hashID(KernelMeta) does not read the DSv4 fields (bits 57-63 unused)
                          self.c.dsv4 and r.get("mFusesDsv4InvRopeFp8Quant", False),
                          self.c.dsv4 and r.get("mUsesDsv4Ue8m0ScaleO", False))

    def info(self, p: RunnerParams, s: SelectParams) -> str:
        parts = [("qkvLayout", p.qkv_layout), ("maskType", s.mask_type), ("kernelType", s.kernel_type),
                 ("tileScheduler", s.tile_scheduler), ("multiCtasKvMode", s.multi_ctas_kv_mode),
                 ("headDimPerCtaV", s.head_dim_per_cta_v), ("headDimQk", p.head_dim_qk), ("headDimV", p.head_dim_v),
                 ("tileSizeQ", s.tile_q), ("tileSizeKv", s.tile_kv), ("numTokensPerPage", s.tokens_per_page),
                 ("dynamicNumTokensPerPage", int(s.dynamic_tokens_per_page)),
                 ("reuseSmemKForV", int(s.reuse_smem_k_for_v)), ("uses2CtaMma", int(s.two_cta))]
        if self.v7:
            parts += [("groupsTokensHeadsQ", int(s.groups_tokens_heads_q)), ("sparseMlaType", p.sparse_mla_type),
                      ("skipsSoftmax", int(s.skips_softmax)), ("bf16QFp8KvTransformMode", s.bf16q_mode),
                      ("fp16Softmax", int(s.fp16_softmax)), ("usesSpcompress", int(s.spcompress))]
            if self.c.dsv4:
                parts += [("fusesDsv4InvRopeFp8Quant", int(s.dsv4)), ("usesDsv4Ue8m0ScaleO", int(s.dsv4))]
        else:
            parts += [("sparseMlaType", p.sparse_mla_type), ("skipsSoftmax", int(s.skips_softmax))]
        return ", ".join(f"{k}={v}" for k, v in parts)

    def hash_params(self, p: RunnerParams, s: SelectParams) -> int:
        if not self.v7:
            return self._hash(p.qkv_layout, s.mask_type, s.kernel_type, s.tile_scheduler, s.multi_ctas_kv_mode,
                              s.head_dim_per_cta_v, p.head_dim_qk, p.head_dim_v, s.tile_q, s.tile_kv,
                              s.tokens_per_page, s.dynamic_tokens_per_page, s.reuse_smem_k_for_v, s.two_cta,
                              p.sparse_mla_type, s.skips_softmax)
        return self._hash(p.qkv_layout, s.mask_type, s.kernel_type, s.tile_scheduler, s.multi_ctas_kv_mode,
                          s.head_dim_per_cta_v, p.head_dim_qk, p.head_dim_v, s.tile_q, s.tile_kv, s.tokens_per_page,
                          s.dynamic_tokens_per_page, s.reuse_smem_k_for_v, s.two_cta, p.sparse_mla_type,
                          s.skips_softmax, s.groups_tokens_heads_q, s.bf16q_mode, False, s.fp16_softmax,
                          s.spcompress, self.c.dsv4 and s.dsv4, self.c.dsv4 and s.dsv4)

    def load(self, p: RunnerParams, s: SelectParams, h: Optional[int] = None) -> dict[str, Any]:
        """loadKernel; ``h``: hash_params(p, s) when already known (select_memo's)."""
        idx = self.map.get(self.hash_params(p, s) if h is None else h)
        if idx is None:
            raise FlashInferError("loadKernel", "Trtllm-gen kernels not found: " + self.info(p, s))
        return self.table.rows[idx]

    def exists(self, p: RunnerParams) -> tuple[bool, str]:   # checkIfKernelExist
        s = SelectParams.of(p)
        self.select(p, s)
        return self.hash_params(p, s) in self.map, self.info(p, s)

    def exists_selected(self, p: RunnerParams, memo: Optional[dict] = None,
                        fresh: Optional[SelectParams] = None) -> tuple[bool, SelectParams, int]:
        """checkIfKernelExist without its message: whether the kernel exists and the selected params
        (``info(p, s)`` is the message, built only for a miss) and their hash. ``memo``: see ``select_memo``;
        ``fresh``: SelectParams.of(p) (it reads no shape field: one per grid, copied here)."""
        if fresh is not None and memo is not None:   # the fresh params' selection, kept per query length and window side
            key = ("fresh", id(fresh), p.max_seq_len_q, p.max_seq_len_kv > p.window_size)
            got = memo.get(key)
            if got is None or got[0] is not fresh:
                s = _copy(fresh)
                h = self.select_memo(p, s, memo)
                if h is not None:   # selectKernel read no shape: its answer holds for every shape of the grid
                    memo[key] = (fresh, _copy(s), h)
            else:
                s, h = _copy(got[1]), got[2]
            if h is None:
                h = self.hash_params(p, s)
            return h in self.map, s, h
        s = SelectParams.of(p) if fresh is None else _copy(fresh)
        h = self.select_memo(p, s, memo)
        if h is None:
            h = self.hash_params(p, s)
        return h in self.map, s, h

    def select_reads_no_shape(self, p: RunnerParams) -> bool:
        """Whether selectKernel reads the runtime shape (batch, KV length, SM count) only through the
        window test (maxSeqLenKv > mAttentionWindowSize): a context kernel (none of the generation
        heuristics), or a one-token generation that is not MLA (selectGqGenerationKernel reads only
        numHeadsQPerKv * maxSeqLenQ, and selectTileSizeQForGqaGeneration runs only for maxSeqLenQ > 1)."""
        return ((p.kernel_type == CONTEXT or (p.kernel_type == GENERATION and p.max_seq_len_q == 1))
                and not self._is_mla_gen(p) and p.sparse_mla_type == 0 and p.chunked_size == INT_MAX)

    def select_memo(self, p: RunnerParams, s: SelectParams, memo: Optional[dict]) -> Optional[int]:
        """``select(p, s)``, its answer kept in ``memo`` (one dict per call, page and code: the runner params
        but the shape fixed) where ``select_reads_no_shape``: keyed by the params it starts from, the query
        length and the window test. Returns hash_params(p, s) of the selected params where kept (hashID
        reads of p only what the memo's call fixes), else None."""
        if memo is None or not self.select_reads_no_shape(p):
            self.select(p, s)
            return None
        key = (p.max_seq_len_q, p.max_seq_len_kv > p.window_size, tuple(s.__dict__.values()))
        got = memo.get(key)
        if got is None:
            try:
                self.select(p, s)
                h = self.hash_params(p, s)
            except FlashInferError as e:
                memo[key] = e
                raise
            memo[key] = (tuple(s.__dict__.values()), h)
            return h
        if isinstance(got, FlashInferError):
            raise got
        s.__dict__.update(zip(_SELECT_FIELDS, got[0]))
        return got[1]

    # -- heuristics -------------------------------------------------------------------------------------
    @staticmethod
    def _is_mla_gen(p: RunnerParams) -> bool:
        return ((p.head_dim_qk == 576 and p.head_dim_v == 512) or (p.head_dim_qk == 320 and p.head_dim_v == 256)
                or (p.sparse_mla_type != 0 and p.head_dim_qk == 512 and p.head_dim_v == 512))

    def _select_tokens_per_page(self, p: RunnerParams, s: SelectParams) -> None:
        s.dynamic_tokens_per_page = False
        dyn = (p.qkv_layout == PAGED_KV and p.sparse_mla_type == 0 and p.head_dim_qk == p.head_dim_v
               and p.tokens_per_page >= 128 and (self.v7 or p.heads_per_kv > 1))
        if p.sparse_mla_type != 0:
            s.tokens_per_page = 1
        elif p.qkv_layout != PAGED_KV:
            s.tokens_per_page = 0
        elif dyn:
            _check(p.tokens_per_page & (p.tokens_per_page - 1) == 0, "selectNumTokensPerPage",
                   f"Dynamic numTokensPerPage requires a power-of-2 page size, got %d. {p.tokens_per_page}")
            s.dynamic_tokens_per_page = True
            s.tokens_per_page = 128
        else:
            s.tokens_per_page = p.tokens_per_page

    def _bf16q_fp8kv(self) -> bool:
        return self.dq == BF16 and self.dk == E4M3 and self.dv == E4M3 and self.do == BF16

    def _has_cga(self, p: RunnerParams, s: SelectParams) -> bool:
        s2 = replace(s, multi_ctas_kv_mode=CGA)
        return self.hash_params(p, s2) in self.map

    def compute_cta(self, cta: Cta, p: RunnerParams, meta: dict[str, Any], s: SelectParams) -> None:
        fn = "computeCtaAndClusterConfig"
        dsv3 = p.batch == 1 and 1 <= p.max_seq_len_q <= 16 and p.head_dim_qk == 576 and p.head_dim_v == 512
        s.select_new = False
        step_q, step_kv = meta["mStepQ"], meta["mStepKv"]
        ctas_q = (p.max_seq_len_q + step_q - 1) // step_q
        if p.max_seq_len_q > 1 and p.kernel_type != CONTEXT:
            if not meta["mGroupsTokensHeadsQ"]:
                ctas_q = p.max_seq_len_q
            else:
                tok = max(1, step_q // p.heads_per_kv)
                ctas_q = _ceil_div(p.max_seq_len_q, tok)
        heads_per_cta = min(p.heads_per_kv, step_q) if meta["mGroupsHeadsQ"] else 1
        ctas_heads = p.num_heads_q // heads_per_cta
        _check(heads_per_cta * ctas_heads == p.num_heads_q, fn, "The numHeadsQ/numHeadsKv is not supported.")
        _check(meta["mHeadDimV"] % s.head_dim_per_cta_v == 0, fn, "The headDimPerCtaV is not supported.")
        ctas_hd = meta["mHeadDimV"] // s.head_dim_per_cta_v
        x, y, z = ctas_q, ctas_heads * ctas_hd, p.batch
        if self._is_mla_gen(p) and s.two_cta:
            _check(ctas_heads == 2 and ctas_hd == 2, fn, "Internal error: numCtasPerHeadDim should be 2.")
            x *= 2
            y //= ctas_heads * ctas_hd
        per_kv = 1
        if s.multi_ctas_kv_mode != DISABLED:
            win = p.max_seq_len_kv
            if p.sparse_mla_type != 0:
                win = min(p.max_seq_len_kv, p.sparse_mla_top_k)
            if s.mask_type == SLIDING:
                if p.max_seq_len_kv > p.window_size:
                    win = min(p.max_seq_len_kv, _i32(p.window_size + step_kv - 1))
                else:
                    win = min(p.max_seq_len_kv, p.chunked_size)
            max_per_kv = _c_div(_i32(win + 2 * step_kv - 1), 2 * step_kv)
            tuned = max_per_kv
            if (self.v7 and self._bf16q_fp8kv() and s.bf16q_mode == BF16Q_SEPARATE and s.kernel_type == SWAPS_AB
                    and s.multi_ctas_kv_mode != GMEM_SEP and p.head_dim_v < 512):
                cdx = 2 if s.two_cta else 1
                max_split = 16 // cdx
                if max_per_kv <= ctas_heads * max_split:
                    launched = _ceil_div(x, cdx) * y * z
                    budget = max(4, _ceil_div(p.sm_count * 13 // 20, launched))
                    target = min(max_per_kv, min(max_split, budget))
                    if 1 < target < max_per_kv:
                        tile = (_ceil_div(p.window_size, target - 1) if s.mask_type == SLIDING
                                else _ceil_div(win, target))
                        if tile <= 1024:
                            tuned = target
            per_kv = min(tuned, max(1, _c_div(p.sm_count, x * y * z)))
            if (self.c.cga_clamp and per_kv > 16 and (p.max_seq_len_q == 1 or p.head_dim_v != 256)
                    and p.head_dim_v < 512 and not dsv3 and not s.force_gmem and s.kernel_type == SWAPS_AB
                    and _ceil_div(win, 16) <= 4096
                    and (s.multi_ctas_kv_mode == CGA or (s.multi_ctas_kv_mode == GMEM and self._has_cga(p, s)))):
                per_kv = 16
            x *= per_kv
            total = x * z * y
            if per_kv <= 1:
                s.multi_ctas_kv_mode = DISABLED
                s.tile_scheduler = PERSISTENT
                s.select_new = True
            # the TRTLLM_GEN_ENABLE_TILE_SIZE_KV64 branch is off unless that environment variable is set
            if self.c.mla_h512_cga:
                use_h512_cga = (dsv3 and p.max_seq_len_q == 1 and s.tokens_per_page == 32
                                and s.head_dim_per_cta_v == 128 and s.tile_q == 16 and self._has_cga(p, s))
                use_cga = (not dsv3 and p.head_dim_v < 512) or use_h512_cga
            else:
                use_cga = not dsv3 and p.head_dim_v < 512
            if (use_cga and 1 < per_kv <= 16 and s.kernel_type == SWAPS_AB
                    and s.multi_ctas_kv_mode == GMEM and not s.force_gmem):
                s.multi_ctas_kv_mode = CGA
                s.select_new = True
        cluster_x = 2 if s.two_cta else 1
        if s.multi_ctas_kv_mode == CGA:
            cluster_x *= per_kv
        total = x * z * y
        if (self._is_mla_gen(p) and (not self.v7 or not s.groups_tokens_heads_q) and not s.reuse_smem_k_for_v
                and not s.select_new and not s.two_cta):
            corr = 1 if dsv3 else 2
            if s.head_dim_per_cta_v == 512 and total * corr <= p.sm_count:
                s.head_dim_per_cta_v = 128 if total * 2 * corr <= p.sm_count else 256
                s.select_new = True
        cta.max_ctas_q, cta.max_ctas_kv, cta.x, cta.y, cta.z, cta.cluster_x = ctas_q, per_kv, x, y, z, cluster_x

    def _use_swaps_mla(self, p: RunnerParams) -> bool:
        max_per_kv = _ceil_div(p.max_seq_len_kv, 256)
        n = _i32(p.batch * p.max_seq_len_q * _ceil_div(p.heads_per_kv, 16))
        per_kv = min(max_per_kv, max(1, _c_div(p.sm_count, n)))
        seq_per_cta = _ceil_div(p.max_seq_len_kv, per_kv)
        return seq_per_cta <= 1024 and n <= p.sm_count

    def _padded_mla_tile_q(self, h: int) -> int:
        _check(h > 0, "getPaddedMlaTileSizeQ", f"The numHeadsQPerKv must be positive, got %d. {h}")
        floor = 8 if self.c.pads_small_mla_groups else 0   # 0.6.18/0.7.0: every power of two keeps the legacy tile
        if h >= 128 or (h >= floor and (h & (h - 1)) == 0):
            return 0
        _check(h <= 64, "getPaddedMlaTileSizeQ", f"Non-power-of-two MLA numHeadsQPerKv must be <= 64, got %d. {h}")
        return max(8, _up_pow2(h))

    def _select_sparse_mla(self, p: RunnerParams, s: SelectParams) -> None:
        h = p.heads_per_kv
        if h <= 32:
            s.kernel_type = SWAPS_AB
            s.tile_kv = 128
            full, half = h, h // 2
            eff = min(p.max_seq_len_kv, p.sparse_mla_top_k)
            max_per_kv = _ceil_div(eff, s.tile_kv)
            use_half = half >= 8 and p.batch * max_per_kv <= p.sm_count // 8
            if self.c.sparse_half_tile_short_q:
                use_half = use_half and p.max_seq_len_q <= 16
            s.tile_q = half if use_half else full
        else:
            s.kernel_type = KEEPS_AB
            s.tile_q = 64
            s.tile_kv = 128
            if s.multi_ctas_kv_mode == GMEM:
                s.multi_ctas_kv_mode = GMEM_SEP
            per_tok = h // 64
            use2 = h == 128 and (p.max_seq_len_q > 1 or p.batch * per_tok * 8 > p.sm_count)
            if use2:
                s.two_cta = True
                s.head_dim_per_cta_v = 256
        if self.v7:
            padded = self._padded_mla_tile_q(h)
            if padded:
                s.tile_q = padded

    def _uses_grouped_mla(self, p: RunnerParams) -> bool:
        dt = ((self.dq, self.dk, self.dv, self.do) in ((BF16, BF16, BF16, BF16), (E4M3, E4M3, E4M3, BF16)))
        return (p.sparse_mla_type == 0 and p.max_seq_len_q > 1 and p.heads_per_kv in (8, 16, 32)
                and 1 <= p.batch <= 16 and p.tokens_per_page == 32 and p.head_dim_qk == 576
                and p.head_dim_v == 512 and dt)

    def _select_mla_gen(self, p: RunnerParams, s: SelectParams) -> None:
        if self.v7:
            if self.c.dsv4 and p.fuses_dsv4:
                raise NotImplementedError("DSv4 fused RoPE quant is not modelled")
            if self._uses_grouped_mla(p):
                s.kernel_type = KEEPS_AB
                s.tile_q = 64
                s.tile_kv = 128
                if s.multi_ctas_kv_mode != DISABLED:
                    s.multi_ctas_kv_mode = GMEM_SEP
                    s.tile_scheduler = STATIC
                s.force_gmem = True
                s.mask_type = DENSE
                s.reuse_smem_k_for_v = False
                s.groups_tokens_heads_q = True
                s.two_cta = False
                rows = p.max_seq_len_q * p.heads_per_kv
                base = p.batch * p.num_heads_kv * _ceil_div(rows, 64)
                s.head_dim_per_cta_v = 128 if base <= 1 else 256 if base <= 4 else 512
                s.head_dim_per_cta_v = min(s.head_dim_per_cta_v, p.head_dim_v)
                return
            s.groups_tokens_heads_q = False
        if p.sparse_mla_type != 0:
            self._select_sparse_mla(p, s)
            return
        h = p.heads_per_kv
        padded = self._padded_mla_tile_q(h) if self.v7 else 0
        if self.v7:
            swaps = padded <= 32 if padded else (h <= 32 or self._use_swaps_mla(p))
        else:
            swaps = h <= 32 or self._use_swaps_mla(p)
        if swaps:
            s.kernel_type = SWAPS_AB
            s.tile_q = padded if padded else (8 if h <= 8 else 16)
        else:
            s.kernel_type = KEEPS_AB
            s.tile_q = 64
            if s.multi_ctas_kv_mode != DISABLED:
                s.multi_ctas_kv_mode = GMEM_SEP
            if h == 128:
                s.two_cta = True
                s.head_dim_per_cta_v = 256

    def _sync_gqa_traits(self, p: RunnerParams, s: SelectParams) -> None:   # 0.7 only
        s.groups_tokens_heads_q = True
        enabled = s.multi_ctas_kv_mode != DISABLED
        if s.kernel_type == KEEPS_AB and p.head_dim_v > 256:
            s.head_dim_per_cta_v = 256
            if enabled:
                s.multi_ctas_kv_mode = GMEM_SEP
        else:
            s.head_dim_per_cta_v = p.head_dim_v
            if enabled and s.multi_ctas_kv_mode == GMEM_SEP:
                s.multi_ctas_kv_mode = GMEM

    _MAINLOOP = {128: 2.2, 64: 1.68, 32: 1.48, 16: 1.2, 8: 1.0}
    _REDUCTION = {128: 1.32, 64: 1.2, 32: 1.08, 16: 1.03, 8: 1.0}

    def _select_tile_q_gqa(self, p: RunnerParams, s: SelectParams) -> None:
        f = _f32
        full_transform = self.v7 and self._bf16q_fp8kv() and s.bf16q_mode == BF16Q_SEPARATE
        factor = 2.0 if full_transform else 1.0
        cta = Cta()
        c = replace(s)
        meta = self.load(p, c)
        self.compute_cta(cta, p, meta, c)
        if cta.x * cta.y * cta.z * 2 > p.sm_count or c.tile_q <= 8:
            return
        default = c.tile_q
        selected = c.tile_q
        best = FLT_MAX
        for t in (128, 64, 32, 16, 8):
            if t > default or t < p.heads_per_kv:
                continue
            c.tile_q = t
            c.kernel_type = KEEPS_AB if t >= 64 else SWAPS_AB
            if self.v7:
                self._sync_gqa_traits(p, c)
            meta = self.load(p, c)
            self.compute_cta(cta, p, meta, c)
            seq_per_cta = _ceil_div(_ceil_div(p.max_seq_len_kv, meta["mStepKv"]), cta.max_ctas_kv) * meta["mStepKv"]
            # float arithmetic as the C++ does it (float * int, float32 throughout)
            mainloop = f(f(f(factor) * f(self._MAINLOOP[t])) * f(float(seq_per_cta))) if self.v7 else \
                f(f(self._MAINLOOP[t]) * f(float(seq_per_cta)))
            red = f(f(f(self._REDUCTION[t]) * f(128.0)) * f(float(cta.max_ctas_kv)))
            model = f(mainloop + red)
            waves = _ceil_div(cta.x * cta.y * cta.z, p.sm_count)
            model = f(model * f(float(waves)))
            if model < best:
                best = model
                selected = t
        s.tile_q = selected
        s.kernel_type = KEEPS_AB if selected >= 64 else SWAPS_AB
        if self.v7:
            self._sync_gqa_traits(p, s)

    def _select_gqa_gen(self, p: RunnerParams, s: SelectParams) -> None:
        if self.v7:
            s.groups_tokens_heads_q = False
            supports = self.dq == self.dk or (self._bf16q_fp8kv() and s.bf16q_mode != BF16Q_FULL)
            if not supports:
                s.groups_tokens_heads_q = False
                s.tile_q = 8 if p.heads_per_kv <= 8 else 16
                s.kernel_type = SWAPS_AB
                return
            s.groups_tokens_heads_q = True
        elif self.dq != self.dk or self.dq != self.dv:
            s.tile_q = 8 if p.heads_per_kv <= 8 else 16
            s.kernel_type = SWAPS_AB
            return
        n = p.heads_per_kv * p.max_seq_len_q
        if n <= 8:
            s.tile_q, s.kernel_type = 8, SWAPS_AB
        elif n <= 16:
            s.tile_q, s.kernel_type = 16, SWAPS_AB
        elif n <= 32:
            s.tile_q, s.kernel_type = 32, SWAPS_AB
        elif n <= 64:
            s.tile_q, s.kernel_type = 64, KEEPS_AB
        else:
            s.tile_q, s.kernel_type = 128, KEEPS_AB
        if self.v7:
            self._sync_gqa_traits(p, s)
        if p.max_seq_len_q > 1:
            self._select_tile_q_gqa(p, s)

    def select(self, p: RunnerParams, s: SelectParams) -> None:   # selectKernel
        self._select_tokens_per_page(p, s)
        mla_gen = _is_generation(p.kernel_type) and self._is_mla_gen(p)
        if mla_gen:
            self._select_mla_gen(p, s)
            s.mask_type = DENSE
            if p.sparse_mla_type == 0:
                _check(p.max_seq_len_kv <= p.window_size and p.chunked_size == INT_MAX, "selectKernel",
                       "TRTLLM-GEN MLA generation does not support sliding-window or chunked attention.")
        elif _is_generation(p.kernel_type):
            self._select_gqa_gen(p, s)
        if p.head_dim_v > 256 and not self._is_mla_gen(p) and s.kernel_type != SWAPS_AB:
            s.head_dim_per_cta_v = 256
        if (p.sparse_mla_type == 0 and (s.mask_type == CAUSAL or p.kernel_type != CONTEXT)
                and (p.max_seq_len_kv > p.window_size or p.chunked_size != INT_MAX)):
            _check(p.max_seq_len_kv <= p.window_size or p.max_seq_len_kv <= p.chunked_size, "selectKernel",
                   "Sliding window attention and chunked attention should not be used together")
            s.mask_type = SLIDING

    def _converge_disabled(self, p: RunnerParams, s: SelectParams, first_pass: int, memo: dict) -> dict[str, Any]:
        """run()'s passes from ``first_pass`` on, multi-CTA off: the kernel it launches."""
        cta = Cta()
        meta: dict[str, Any] = {}
        for pass_ in range(first_pass, 4):
            meta = self.load(p, s, self.select_memo(p, s, memo))
            self.compute_cta(cta, p, meta, s)
            if not s.select_new:
                return meta
            _check(pass_ + 1 < 4, "run", "trtllm-gen kernel selection did not converge in %d passes. 4")
        return meta

    def run(self, p: RunnerParams, max_active_clusters: int = 1 << 20) -> dict[str, Any]:
        """TllmGenFmhaKernel::run up to the launch: the kernel it launches."""
        r = self.run_occupancies(p, (max_active_clusters,))[0]
        if isinstance(r, FlashInferError):
            raise r
        return r

    def run_occupancies(self, p: RunnerParams, occupancies: tuple[int, ...],
                        selected: Optional[SelectParams] = None, memo: Optional[dict] = None,
                        selected_hash: Optional[int] = None) -> list[Any]:
        """``run`` for each of ``occupancies`` (cuOccupancyMaxActiveClusters): the selection loop does not
        read the occupancy, only the CGA fallback after it does, so the loop runs once and the fallback once
        per occupancy that takes it. ``selected``: SelectParams.of(p) after select(p, .) (checkIfKernelExist's
        own, equal to the loop's first select: select reads only p and the fresh params). Each answer is the
        kernel's row, or the FlashInferError the fallback of that occupancy throws; a throw before the
        fallback raises (it is every occupancy's). ``memo``: see ``select_memo``; ``selected_hash``:
        hash_params(p, selected) where known."""
        s = selected if selected is not None else SelectParams.of(p)
        cta = Cta()
        meta: dict[str, Any] = {}
        for pass_ in range(4):
            if pass_ or selected is None:
                meta = self.load(p, s, self.select_memo(p, s, memo))
            else:
                meta = self.load(p, s, selected_hash)
            self.compute_cta(cta, p, meta, s)
            if not s.select_new:
                break
            _check(pass_ + 1 < 4, "run", "trtllm-gen kernel selection did not converge in %d passes. 4")
            if memo is not None and s.multi_ctas_kv_mode == DISABLED and self.select_reads_no_shape(p):
                # multi-CTA off and selectKernel shape-free: the next pass reads the shape nowhere that
                # changes the kernel (computeCtaAndClusterConfig's multi-CTA branch is skipped, its
                # MLA split does not apply) and converges; no CGA fallback follows. Kept per params.
                key = ("rest", pass_, p.max_seq_len_q, p.max_seq_len_kv > p.window_size, tuple(s.__dict__.values()))
                got = memo.get(key)
                if got is None:
                    try:
                        got = self._converge_disabled(p, s, pass_ + 1, memo)
                    except FlashInferError as e:
                        got = e
                    memo[key] = got
                if isinstance(got, FlashInferError):
                    raise got
                return [got] * len(occupancies)
        out = []
        for occ in occupancies:
            if s.multi_ctas_kv_mode == CGA and occ * cta.cluster_x < cta.x * cta.y * cta.z:
                s2, cta2 = _copy(s), _copy(cta)
                s2.force_gmem = True
                s2.multi_ctas_kv_mode = GMEM
                m2 = self.load(p, s2, self.select_memo(p, s2, memo))
                self.compute_cta(cta2, p, m2, s2)
                if s2.select_new:   # FLASHINFER_CHECK in run(): this occupancy's launch throws
                    out.append(FlashInferError("run", "trtllm-gen kernel selection did not converge after "
                                                      "CgaSmemReduction fallback to GmemReduction."))
                else:
                    out.append(m2)
            else:
                out.append(meta)
        return out


_FAMILIES: dict[tuple, KernelFamily] = {}
_DTYPE_INDEX: dict[int, tuple[KernelTable, dict[tuple[str, str, str, str], tuple[int, ...]]]] = {}


def _dtype_index(table: KernelTable) -> dict[tuple[str, str, str, str], tuple[int, ...]]:
    """(dtype Q, K, V, O) -> the table's row numbers of those dtypes, ascending (loadKernels' order)."""
    got = _DTYPE_INDEX.get(id(table))
    if got is None or got[0] is not table:
        idx: dict[tuple[str, str, str, str], list[int]] = {}
        for i, r in enumerate(table.rows):
            idx.setdefault((r["mDataTypeQ"], r["mDataTypeK"], r["mDataTypeV"], r["mDataTypeO"]), []).append(i)
        got = _DTYPE_INDEX[id(table)] = (table, {k: tuple(v) for k, v in idx.items()})
    return got[1]


def family(table: KernelTable, sm: int, dq: str, dk: str, dv: str, do: str, code: "str | Code") -> KernelFamily:
    key = (id(table), sm, dq, dk, dv, do, resolve(code).name)
    if key not in _FAMILIES:
        _FAMILIES[key] = KernelFamily(table, sm, dq, dk, dv, do, code)
    return _FAMILIES[key]


def runner_check(sm: int, dq: str, dk: str, dv: str, do: str, code: "str | Code") -> None:
    """TllmGenFmhaRunner's constructor (fmhaRunner.cuh)."""
    fn = "TllmGenFmhaRunner"
    archs = (SM100, SM103, SM107) if resolve(code).v7 else (SM100, SM103)   # 0.6.18+ accept kSM_107
    _check(sm in archs, fn, "Unsupported architecture")
    _check(dq in (E4M3, FP16, BF16, INT8), fn, f"Unsupported Q data type: {dq}")
    _check(dk in (E4M3, E2M1, FP16, BF16, INT8), fn, f"Unsupported K data type: {dk}")
    _check(dv in (E4M3, E2M1, FP16, BF16), fn, f"Unsupported V data type: {dv}")
    _check(do in (E4M3, FP16, BF16, E2M1), fn, f"Unsupported Output data type: {do}")


# ---------------------------------------------------------------------------------------------------
# launcher-level answer

@dataclass(frozen=True)
class Selection:
    ok: bool
    kind: str                  # "OK" | "MISS" | "ERR"
    function: Optional[str]    # the launched kernel's function name (its cubin: <function>.cubin)
    sha256: Optional[str]
    detail: str                # MISS: the launcher's info (the missing kernel's parameters); ERR: the error

    @property
    def cubin(self) -> Optional[str]:
        return None if self.function is None else self.function + ".cubin"

    def line(self) -> str:
        return f"OK {self.function}" if self.ok else f"{self.kind} {self.detail}"


def launch(table: KernelTable, code: "str | Code", *, max_active_clusters: int = 1 << 20, **kw: Any) -> Selection:
    """What trtllm_paged_attention_launcher (mode 0 context, 1 decode) or trtllm_ragged_attention_launcher
    (mode 2) does with these arguments (``launch_occupancies``' keywords): the kernel TllmGenFmhaKernel::run
    launches, the launcher's "Missing TRTLLM-GEN kernel" (MISS), or the error FlashInfer's code raises (ERR)."""
    return launch_occupancies(table, code, occupancies=(max_active_clusters,), **kw)[0]


def launch_occupancies(table: KernelTable, code: "str | Code", *, batch: int, max_q_len: int, max_kv_len: int,
                       sm_count: int, occupancies: tuple[int, ...] = (1 << 20,), **kw: Any) -> list[Selection]:
    """``launch`` at each of ``occupancies`` (max_active_clusters), one selection for all of them: only
    run()'s CGA fallback reads the occupancy (KernelFamily.run_occupancies). Keywords: ``launch_grid``'s."""
    return launch_grid(table, code, shapes=((batch, max_q_len, max_kv_len, sm_count, occupancies),), **kw)[0]


def launch_grid(table: KernelTable, code: "str | Code", *, mode: int, sm: int, dtype_q: str, dtype_kv: str,
                dtype_o: str, head_dim_qk: int, head_dim_v: int, page_size: int, num_heads_q: int,
                num_heads_kv: int, shapes: Sequence[tuple[int, int, int, int, tuple[int, ...]]],
                window_left: int = -1, sparse_top_k: int = 0, skips_softmax: bool = False, causal: bool = True,
                bf16q_mode: Optional[int] = None, memo: Optional[dict] = None) -> list[list[Selection]]:
    """``launch_occupancies`` at each of ``shapes`` (batch, max query length, max KV length, SM count,
    occupancies): the launcher's checks that read no shape run once for all of them. ``memo``: a dict kept
    across the shapes of one call (KernelFamily.select_memo); None: none kept."""
    c = resolve(code)
    if bf16q_mode is None:   # flashinfer.decode.trtllm_batch_decode_with_kv_cache's default (0.6.18+)
        bf16q_mode = BF16Q_SEPARATE if (mode == 1 and (dtype_q, dtype_kv, dtype_o) == (BF16, E4M3, BF16)) else 0
    try:
        runner_check(sm, dtype_q, dtype_kv, dtype_kv, dtype_o, code)
        fam = family(table, sm, dtype_q, dtype_kv, dtype_kv, dtype_o, code)
        if num_heads_q % num_heads_kv != 0:
            raise FlashInferError("", "num_qo_heads must be a multiple of num_kv_heads")
        common = dict(head_dim_qk=head_dim_qk, head_dim_v=head_dim_v, num_heads_q=num_heads_q,
                      num_heads_kv=num_heads_kv, window_size=INT_MAX if window_left == -1 else window_left + 1,
                      skips_softmax=skips_softmax)
        if c.v7:   # trtllm_paged_attention_launcher's transform-mode check (0.6.18+)
            if bf16q_mode != 0 and not (mode == 1 and (dtype_q, dtype_kv, dtype_o) == (BF16, E4M3, BF16)):
                raise FlashInferError("", "bf16q_fp8kv_transform_mode is only supported for BF16 query, FP8 E4M3 "
                                          "KV, BF16 output decode")
            common["bf16q_fp8kv_mode"] = bf16q_mode if mode != 2 else 0
        if mode == 2:
            common.update(kernel_type=CONTEXT, mask_type=CAUSAL if causal else DENSE, qkv_layout=SEPARATE_QKV,
                          tile_scheduler=PERSISTENT, multi_ctas_kv=False, tokens_per_page=0)
        else:
            mla = ((head_dim_qk == 576 and head_dim_v == 512) or (head_dim_qk == 320 and head_dim_v == 256)
                   or (sparse_top_k > 0 and head_dim_qk == 512 and head_dim_v == 512))
            if not (mla or sparse_top_k <= 0):
                raise FlashInferError("", "Only decode MLA supports sparse MLA")
            if mode == 0:
                common.update(kernel_type=CONTEXT, mask_type=CAUSAL if causal else DENSE, qkv_layout=PAGED_KV,
                              tile_scheduler=PERSISTENT, multi_ctas_kv=False, tokens_per_page=page_size,
                              sparse_mla_type=1 if sparse_top_k > 0 else 0, sparse_mla_top_k=sparse_top_k)
            else:
                common.update(kernel_type=GENERATION, mask_type=DENSE if mla else CAUSAL, qkv_layout=PAGED_KV,
                              tile_scheduler=STATIC, multi_ctas_kv=True, tokens_per_page=page_size,
                              sparse_mla_type=1 if sparse_top_k > 0 else 0, sparse_mla_top_k=sparse_top_k)
    except FlashInferError as e:
        return [[_err(e)] * len(sh[4]) for sh in shapes]
    out: list[list[Selection]] = []
    p0: Optional[RunnerParams] = None
    fresh: Optional[SelectParams] = None
    oks: dict[Any, Selection] = {}   # answers by kernel name, misses by selected params
    for batch, max_q_len, max_kv_len, sm_count, occupancies in shapes:
        try:
            if p0 is None:
                p = p0 = RunnerParams(batch=batch, max_seq_len_q=max_q_len, max_seq_len_kv=max_kv_len,
                                      sm_count=sm_count, **common)
            else:   # the same params but the shape
                p = _copy(p0)
                p.batch, p.max_seq_len_q, p.max_seq_len_kv, p.sm_count = batch, max_q_len, max_kv_len, sm_count
            if fresh is None:
                fresh = SelectParams.of(p)
            found, s, h = fam.exists_selected(p, memo, fresh)
            if not found:   # the message: the selected params' (info reads of p only what the grid fixes)
                key = ("info", tuple(s.__dict__.values()))
                miss = oks.get(key)   # type: ignore[call-overload]
                if miss is None:
                    miss = oks[key] = Selection(False, "MISS", None, None, fam.info(p, s))   # type: ignore[index]
                out.append([miss] * len(occupancies))
                continue
            out.append([_err(m) if isinstance(m, FlashInferError)
                        else oks.get(m["mFuncName"]) or oks.setdefault(m["mFuncName"], _ok(m))
                        for m in fam.run_occupancies(p, occupancies, s, memo, h)])
        except FlashInferError as e:
            out.append([_err(e)] * len(occupancies))
    return out


def _ok(meta: dict[str, Any]) -> Selection:
    return Selection(True, "OK", meta["mFuncName"], meta["sha256"], "")


def _err(e: FlashInferError) -> Selection:
    return Selection(False, "ERR", None, None, f"{e.function}: {e.message}" if e.function else e.message)


def oracle_line(q: Any, table: KernelTable, version: str) -> str:
    """The line the oracle harness prints for query ``q`` (attnplan/oracle/trtllm_gen.py Query); ``version``:
    a flashinfer version or a code name."""
    code = version if version in CODES or version in ALIASES else code_of(version)
    if code is None:
        raise InvalidInputError("flashinfer_version", f"no known trtllm-gen selection code for flashinfer {version}",
                                list(CODES))
    return launch(table, code, mode=q.mode, sm=q.sm, dtype_q=q.dtype_q, dtype_kv=q.dtype_kv,
                  dtype_o=q.dtype_o, head_dim_qk=q.head_dim_qk, head_dim_v=q.head_dim_v, page_size=q.page_size,
                  num_heads_q=q.num_heads_q, num_heads_kv=q.num_heads_kv, batch=q.batch, max_q_len=q.max_q_len,
                  max_kv_len=q.max_kv_len, sm_count=q.sm_count, window_left=q.window_left,
                  sparse_top_k=q.sparse_top_k, skips_softmax=q.skips_softmax, causal=q.causal,
                  max_active_clusters=q.max_active_clusters, bf16q_mode=q.bf16q_mode).line()

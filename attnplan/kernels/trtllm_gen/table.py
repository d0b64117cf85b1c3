"""FlashInfer's trtllm-gen FMHA kernel table (``sTllmGenFmhaKernelMetaInfos``) as data.

Source: ``cubins/<pin>/fmha/trtllm-gen/include/flashInferMetaInfo.h`` (the artifact FlashInfer downloads
for ``ArtifactPath.TRTLLM_GEN_FMHA``, or the ``flashinfer-cubin`` wheel of the same version) and
``checksums.txt`` beside it. The header declares ``struct TllmGenFmhaKernelMetaInfo`` and one brace row
per kernel in the struct's field order; this module reads both (parse_meta_info), keeps the fields the
selection code reads (``COLUMNS``) and serializes them (to_json / load). Shipped tables live under
``tables/<pin[:8]>.json.gz`` (built by scripts/trtllm_table.py). Pure: no torch, no CUDA.

A header or checksums file that does not parse, is truncated, or belongs to another pin raises
``TableError`` naming the file: a node's broken table is never read as "no kernels".
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, Optional

from ...errors import TableError  # noqa: F401 - re-exported (node.py, probe.py, cli/cubins.py)

FORMAT = "attnplan-trtllm-gen-table/1"

# Data_type (include/flashinfer/trtllm/common.h, enum Data_type) in declaration order.
DATA_TYPES = ("FP16", "BF16", "FP32", "INT8", "INT32", "E4M3", "E5M2", "E2M1", "UNKNOWN")
# kSM_* (include/flashinfer/trtllm/common.h): kSM_<major><minor> is the capability as an int, and a family
# constant kSM_<n>f is 10000 + n (kSM_100f = 10100): the table names each kernel's SM with them.
_SM_NAME = re.compile(r"kSM_(\d+)(f?)")


def sm_constant(name: str) -> int:
    """The value of FlashInfer's ``kSM_*`` constant ``name``."""
    m = _SM_NAME.fullmatch(name)
    if not m:
        raise TableError("kSM constant", f"not a kSM_* constant: {name}")
    return int(m.group(1)) + (10000 if m.group(2) else 0)



# The fields the selection code (fmhaKernels.cuh: loadKernels, hashID(KernelMeta), is2QSlidingWindowKernel,
# isDynamicNumTokensPerPageKernel, computeCtaAndClusterConfig, the 0.7.2 shared-memory filter) reads,
# plus the cubin's identity (mFuncName -> <name>.cubin, sha256).
COLUMNS = (
    "mDataTypeQ", "mDataTypeKv", "mDataTypeK", "mDataTypeV", "mDataTypeO", "mTileSizeQ", "mTileSizeKv",
    "mStepQ", "mStepKv", "mHeadDimPerCtaV", "mHeadDimQk", "mHeadDimV", "mSM", "mFuncName",
    "mSharedMemBytes", "mThreadsPerCTA", "mQkvLayout", "mNumTokensPerPage", "mMaskType", "mKernelType",
    "mTileScheduler", "mMultiCtasKvMode", "mNumEltsPerSageAttnBlkQ", "mNumEltsPerSageAttnBlkK",
    "mNumEltsPerSageAttnBlkP", "mNumEltsPerSageAttnBlkV", "mGroupsHeadsQ", "mGroupsTokensHeadsQ",
    "mReuseSmemKForV", "m2CtaMma", "mSparseAttn", "mSkipsSoftmaxWhenPossible", "sha256",
)
# Fields later table formats add (FlashInfer 0.7.x's selection reads them); absent = false / 0.
OPTIONAL_COLUMNS = ("mEnablesBf16QFp8KvKOnlyTransform", "mSeparateTransformedKv", "mFp16Softmax",
                    "mUsesSpcompress", "mFusesDsv4InvRopeFp8Quant", "mUsesDsv4Ue8m0ScaleO")
_DTYPE_COLS = {"mDataTypeQ", "mDataTypeKv", "mDataTypeK", "mDataTypeV", "mDataTypeO"}
_STR_COLS = {"mFuncName", "sha256"}
_BOOL_COLS = {"mGroupsHeadsQ", "mGroupsTokensHeadsQ", "mReuseSmemKForV", "m2CtaMma",
              "mSkipsSoftmaxWhenPossible", *OPTIONAL_COLUMNS}


@dataclass(frozen=True, eq=False)   # identity: a table is one artifact (hashable for caches)
class KernelTable:
    rows: tuple[dict[str, Any], ...]
    origin: str
    pin: str = "unknown"
    license: str = ""
    struct_fields: tuple[str, ...] = ()
    checksums_sha256: Optional[str] = None   # sha256 of checksums.txt itself
    header_sha256: Optional[str] = None      # sha256 of flashInferMetaInfo.h (checksums.txt lists it)
    _index: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def short_pin(self) -> str:
        return self.pin[:8]

    def to_json(self, pin: str, checksums: Optional["Checksums"] = None) -> dict[str, Any]:
        cols = list(COLUMNS) + [c for c in OPTIONAL_COLUMNS if any(c in r for r in self.rows)]
        data: dict[str, list] = {}
        for c in cols:
            vals = [r.get(c, False) for r in self.rows]
            if c in _BOOL_COLS:
                vals = [int(bool(v)) for v in vals]
            data[c] = vals
        doc: dict[str, Any] = {
            "format": FORMAT, "pin": pin, "origin": self.origin, "count": len(self.rows),
            "license": self.license, "struct": list(self.struct_fields), "columns": data,
            "header_sha256": self.header_sha256,
        }
        if checksums is not None:
            missing = [r["mFuncName"] for r in self.rows
                       if checksums.files.get(r["mFuncName"] + ".cubin") not in (None, r["sha256"])]
            if missing:
                raise TableError(checksums.origin, f"{len(missing)} kernels' sha256 differ from the header's "
                                                   f"(first {missing[0]})")
            doc["checksums_sha256"] = checksums.sha256
            doc["header_sha256"] = checksums.files.get("include/flashInferMetaInfo.h")
        return doc


@dataclass(frozen=True)
class Checksums:
    files: dict[str, str]
    origin: str
    sha256: str


def parse_checksums(text: str, origin: str) -> Checksums:
    files: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise TableError(origin, f"line {n} is not '<sha256>  <file>': {line[:80]!r}")
        files[parts[1]] = parts[0]
    if not files:
        raise TableError(origin, "empty checksums file")
    return Checksums(files, origin, hashlib.sha256(text.encode()).hexdigest())


_STRUCT_RE = re.compile(r"struct\s+TllmGenFmhaKernelMetaInfo\s*\{(.*?)\};", re.S)
_FIELD_RE = re.compile(r"^\s*[\w:][\w:\s*]*?[\s*](\w+)\s*;", re.M)   # the last identifier of each declaration
_ARRAY_RE = re.compile(r"sTllmGenFmhaKernelMetaInfos\s*\[\s*\]\s*=\s*\{", re.S)
_ROW_RE = re.compile(r"\{([^{}]*)\}")
_TOKEN_RE = re.compile(r'"[^"]*"|[^,\s]+')


def _value(col: str, tok: str, origin: str, n: int) -> Any:
    if tok.startswith('"'):
        return tok[1:-1]
    if col in _DTYPE_COLS:
        name = tok.removeprefix("DATA_TYPE_")
        if name not in DATA_TYPES:
            raise TableError(origin, f"kernel {n}: unknown data type {tok}")
        return name
    if col == "mSM":
        if _SM_NAME.fullmatch(tok):
            return sm_constant(tok)
        if tok.isdigit() and len(tok) <= 6:   # a capability number, never a 5,000-digit one
            return int(tok)
        raise TableError(origin, f"kernel {n}: unknown SM {tok[:32]}")
    if tok in ("true", "false"):
        return tok == "true"
    if tok == "nullptr":
        return None
    try:
        return int(tok)
    except ValueError:
        raise TableError(origin, f"kernel {n}: field {col} = {tok!r} is not a number") from None


def parse_meta_info(text: str, origin: str) -> KernelTable:
    """Rows of ``sTllmGenFmhaKernelMetaInfos`` in a flashInferMetaInfo.h (the header as FlashInfer ships it)."""
    m = _STRUCT_RE.search(text)
    if not m:
        raise TableError(origin, "no 'struct TllmGenFmhaKernelMetaInfo' (not a trtllm-gen FMHA table)")
    fields = tuple(_FIELD_RE.findall(m.group(1)))
    need = [c for c in COLUMNS if c not in fields]
    if need:
        raise TableError(origin, f"the struct lacks {', '.join(need)} (a table format attnplan does not read)")
    a = _ARRAY_RE.search(text, m.end())
    if not a:
        raise TableError(origin, "no sTllmGenFmhaKernelMetaInfos[] array")
    end = text.find("};", a.end())
    if end < 0:
        raise TableError(origin, "the kernel array is not closed (truncated file?)")
    body = text[a.end():end]
    rows = []
    for n, rm in enumerate(_ROW_RE.finditer(body)):
        toks = _TOKEN_RE.findall(rm.group(1))
        if len(toks) != len(fields):
            raise TableError(origin, f"kernel {n} has {len(toks)} fields, the struct {len(fields)}")
        full = {f: _value(f, t, origin, n) for f, t in zip(fields, toks)}
        rows.append({c: full[c] for c in COLUMNS + OPTIONAL_COLUMNS if c in full})
    if not rows:
        raise TableError(origin, "the kernel array is empty")
    lic = text[: text.find("*/") + 2] if text.lstrip().startswith("/*") else ""
    return KernelTable(tuple(rows), origin, license=lic, struct_fields=fields,
                       header_sha256=hashlib.sha256(text.encode()).hexdigest())


def from_json(doc: dict[str, Any], origin: str) -> KernelTable:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TableError(origin, f"format {doc.get('format') if isinstance(doc, dict) else type(doc).__name__!r}, "
                                 f"expected {FORMAT!r}")
    cols, n, pin = doc.get("columns"), doc.get("count"), doc.get("pin")
    if not (isinstance(cols, dict) and cols and all(isinstance(v, list) for v in cols.values())
            and isinstance(n, int) and not isinstance(n, bool) and n >= 0 and isinstance(pin, str)):
        raise TableError(origin, "not a kernel table document (columns of lists, count, pin)")
    if any(len(v) != n for v in cols.values()):
        raise TableError(origin, "columns of unequal length (truncated?)")
    names = [c for c in cols]
    rows = []
    for i in range(n):
        r = {c: cols[c][i] for c in names}
        for c in _BOOL_COLS & set(names):
            r[c] = bool(r[c])
        rows.append(r)
    return KernelTable(tuple(rows), doc.get("origin", origin), pin=pin, license=doc.get("license", ""),
                       struct_fields=tuple(doc.get("struct", ())), checksums_sha256=doc.get("checksums_sha256"),
                       header_sha256=doc.get("header_sha256"))


_SHIPPED: dict[str, KernelTable] = {}

# Pins FlashInfer versions use for ArtifactPath.TRTLLM_GEN_FMHA (flashinfer/artifacts.py of each version).
PIN_0_6 = "158f6fa11ef139a098cfddcdddce73ca99d164ad"   # flashinfer 0.6.12 - 0.6.17 (flashinfer-cubin 0.6.13 wheel)


def shipped(pin: str = PIN_0_6) -> KernelTable:
    """The table attnplan ships for ``pin`` (``tables/<pin[:8]>.json.gz``)."""
    key = pin[:8]
    if key not in _SHIPPED:
        try:
            raw = resources.files(__package__).joinpath("tables", f"{key}.json.gz").read_bytes()
        except FileNotFoundError:
            raise TableError(f"tables/{key}.json.gz", "attnplan ships no table for this pin") from None
        _SHIPPED[key] = load_bytes(raw, f"attnplan/kernels/trtllm_gen/tables/{key}.json.gz")
    return _SHIPPED[key]


def load_bytes(raw: bytes, origin: str) -> KernelTable:
    try:
        doc = json.loads(gzip.decompress(raw))
    except (OSError, EOFError, ValueError) as exc:
        raise TableError(origin, f"not a gzipped JSON table ({exc})") from None
    return from_json(doc, origin)


def known_tables() -> Iterable[str]:
    return [p.name.split(".")[0] for p in resources.files(__package__).joinpath("tables").iterdir()
            if p.name.endswith(".json.gz")]

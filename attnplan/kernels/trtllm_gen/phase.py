"""Which trtllm-gen cubin a plan's phase loads, decided as FlashInfer decides it (select.py over a table).

A phase is one FlashInfer call, named by its entry point (backends.yaml ``calls.<phase>.entry_point``):
``trtllm_batch_context_with_kv_cache`` (paged context), ``trtllm_batch_decode_with_kv_cache``,
``trtllm_batch_decode_with_kv_cache_mla`` (qk = kv_lora_rank + rope, vo = kv_lora_rank, one KV head),
``trtllm_ragged_attention_deepseek`` (separate Q/K/V of the new tokens, in the query dtype). Those
wrappers pass the launcher the arguments ``phase_call`` builds.

Part of the choice depends on the runtime shape (batch, KV length, the GPU's SM count, and on the GPU's
cluster occupancy for CGA reduction): ``SERVING_SHAPES`` is the grid a serving engine's steps fall in;
a configuration whose kernel exists at some shapes and not at others is refused, naming the shapes.

Which selection code and which table (``decide``):
* flashinfer 0.6.12 - 0.6.17: FlashInfer 0.6.13's selection code over pin 158f6fa1's table (the table
  those versions download, shipped here from flashinfer-cubin 0.6.13);
* flashinfer 0.6.18, 0.6.18.post1, 0.7.0, 0.7.0.post1, 0.7.1, 0.7.2, 0.7.2.post1: each release family's own
  selection code (select.py ``CODES``: 0.6.18, 0.7.0, 0.7.1 = 0.7.1/0.7.2, 0.7.2.post1; each held to that
  release's headers by the oracle) over pin 158f6fa1's table: their own table (pin 2d6a5a02, flashinfer/artifacts.py
  ArtifactPath.TRTLLM_GEN_FMHA of every one of them) is not public, so a kernel absent from every known table
  is refused (fail closed) unless that release's source selects the family on purpose (``added_in_0_7``:
  grouped MLA generation, the bf16-query/e4m3-KV transform kernels, both in 0.6.18's source and after), and
  the answer names the table that decided and what was assumed;
* any other version: not decided here (``None``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from . import select as sel
from .wrappers import wrapper_error
from .table import KernelTable, PIN_0_6, TableError, shipped

# config vocabulary -> FlashInfer Data_type names
DTYPE = {"fp16": "FP16", "bf16": "BF16", "fp8_e4m3": "E4M3", "fp8_e5m2": "E5M2", "nvfp4": "E2M1",
         "fp32": "FP32", "int8": "INT8",
         # torch names, as a PhasePlan spells its query/output dtypes
         "float16": "FP16", "bfloat16": "BF16", "float8_e4m3fn": "E4M3", "float8_e5m2": "E5M2", "float32": "FP32"}

# The capability family FlashInfer's trtllm-gen kernels are built for (kSM_100f: 10.x); other nodes are
# trtllm.family's answer, not the table's.
FAMILY_MAJORS = (10,)
# SM counts of the GPUs per capability (B200/GB200 148, B300/GB300 160; 10.7 unknown: both).
SM_COUNTS = {100: (148,), 103: (148, 160), 107: (148, 160)}
BATCHES = (1, 4, 16, 64, 256)
KV_LENS = (128, 2048, 32768, 131072)
PREFILL_Q_LENS = (1, 512, 8192)
# cuOccupancyMaxActiveClusters: enough clusters, or too few (run() then falls back to GmemReduction)
OCCUPANCY = (1 << 20, 0)


@dataclass(frozen=True)
class Decision:
    """One phase's trtllm-gen kernel, or why there is none."""
    function: Optional[str]               # the kernel run() launches at the most shapes (its cubin: <function>.cubin)
    sha256: Optional[str]
    functions: tuple[str, ...]            # every kernel the serving shapes load
    missing: Optional[str]                # None: a kernel at every serving shape; else what is missing and where
    table: str                            # the table that decided, e.g. "158f6fa1 (flashinfer-cubin 0.6.13)"
    code: str                             # the selection code that decided, e.g. "flashinfer 0.6.13"
    # 0.7 code over the 0.6 table: kernel families absent from that table that 0.7.2.post1's source selects
    # on purpose (so its own table, not public, has them); the shapes that load them name no cubin here
    assumed: tuple[str, ...] = ()
    sha256s: tuple[str, ...] = ()         # each of ``functions``' cubin sha256 (checksums.txt), in that order

    @property
    def ok(self) -> bool:
        return self.missing is None

    @property
    def cubin(self) -> Optional[str]:
        return None if self.function is None else self.function + ".cubin"

    @property
    def cubins(self) -> tuple[str, ...]:
        return tuple(f + ".cubin" for f in self.functions)

    def provenance(self) -> str:
        return self._provenance

    @functools.cached_property   # asked for every page of every trtllm-gen candidate (candidates.py)
    def _provenance(self) -> str:
        extra = f"; assumed from {self.code}'s source: {'; '.join(self.assumed)}" if self.assumed else ""
        return f"table {self.table}, selection code {self.code}{extra}"


@functools.lru_cache(maxsize=4)
def node_table(cubin_dir: str, pin: str, checksums_sha256: Optional[str]) -> KernelTable:
    """A node's own table (kernels/trtllm_gen/node.py load), read and verified once per process."""
    from . import node as tgnode

    nt = tgnode.load(tgnode.Location(cubin_dir, "the node's", pin, checksums_sha256))
    if nt.table is None:   # gone since the probe read it: as a table that is not FlashInfer's (candidates.py)
        raise TableError(str(cubin_dir), nt.why)
    return nt.table


def unusable_table(error: str) -> "Decision":
    """The node's table is on disk but is not FlashInfer's and cannot be downloaded again: the node is not ready."""
    return Decision(None, None, (), f"the node's trtllm-gen kernel table is not FlashInfer's and the artifactory does not "
                                    f"answer to download it again: {error}", "the node's (unusable)", "none")


# The release whose headers the oracle compiles for each selection code (the label names it): 0.7.0's headers
# are 0.7.0.post1's, byte for byte.
CODE_LABELS = {"0.6.13": "flashinfer 0.6.13", "0.6.18": "flashinfer 0.6.18", "0.7.0": "flashinfer 0.7.0.post1",
               "0.7.1": "flashinfer 0.7.1", "0.7.2.post1": "flashinfer 0.7.2.post1"}


def code_for(flashinfer_version: Optional[str]) -> Optional[tuple[str, str, str]]:
    """(selection code, a select.CODES key; its label; the pin of the table it is run over) for a flashinfer
    version, or None when its selection code is not known. The table: 158f6fa1 for every code (the only
    public one; 0.6.18+'s own pin 2d6a5a02 is read from a node when it has it, ``decide(table=...)``)."""
    if not flashinfer_version:
        return None
    code = sel.code_of(str(flashinfer_version))
    if code is None:
        return None
    return code, CODE_LABELS[code], PIN_0_6


def _table_label(t: KernelTable) -> str:
    if t.origin.startswith("attnplan/") or t.origin.startswith("flashinfer_cubin-0.6.13"):
        return f"{t.short_pin} (flashinfer-cubin 0.6.13)"
    return f"{t.short_pin} (the node's, {t.origin})"


# FlashInfer's trtllm-gen entry points (backends.yaml names them per backend and phase: calls.<phase>.entry_point)
CONTEXT = "trtllm_batch_context_with_kv_cache"
DECODE = "trtllm_batch_decode_with_kv_cache"
MLA_DECODE = "trtllm_batch_decode_with_kv_cache_mla"
RAGGED = "trtllm_ragged_attention_deepseek"
ENTRY_POINTS = (CONTEXT, DECODE, MLA_DECODE, RAGGED)


@dataclass(frozen=True)
class PhaseCall:
    mode: int           # 0 paged context, 1 paged decode, 2 ragged
    dtype_q: str
    dtype_kv: str
    dtype_o: str
    head_dim_qk: int
    head_dim_v: int
    num_heads_q: int
    num_heads_kv: int
    q_len: int          # decode: 1 + speculative tokens
    window_left: int    # -1: none
    entry: str = DECODE  # the FlashInfer function the phase calls


@functools.lru_cache(maxsize=4096)   # pure; a plan asks it again for every page of a candidate
def phase_call(entry_point: str, *, query_dtype: str, kv_dtype: str, out_dtype: str, head_dim_qk: int,
               head_dim_vo: int, num_qo_heads: int, num_kv_heads: int, num_speculative_tokens: int = 0,
               sliding_window: Optional[int] = None, kv_lora_rank: Optional[int] = None,
               qk_rope_head_dim: Optional[int] = None) -> Optional[PhaseCall]:
    """The launcher arguments a call of FlashInfer's ``entry_point`` (``flashinfer.decode.trtllm_batch_decode_with_kv_cache``
    or its bare name) passes. None: not a trtllm-gen FMHA entry point, or an MLA call without MLA dims."""
    entry = entry_point.rsplit(".", 1)[-1]
    win = -1 if sliding_window is None else sliding_window - 1   # window_left (vLLM: sliding_window - 1)
    q_len = 1 + num_speculative_tokens
    if entry in (CONTEXT, DECODE):
        return PhaseCall(0 if entry == CONTEXT else 1, DTYPE[query_dtype], DTYPE[kv_dtype], DTYPE[out_dtype],
                         head_dim_qk, head_dim_vo, num_qo_heads, num_kv_heads, q_len if entry == DECODE else 0, win,
                         entry)
    if entry == MLA_DECODE and kv_lora_rank and qk_rope_head_dim is not None:
        # query [.., H, kv_lora_rank + rope] over one latent KV head
        return PhaseCall(1, DTYPE[query_dtype], DTYPE[kv_dtype], DTYPE[out_dtype], kv_lora_rank + qk_rope_head_dim,
                         kv_lora_rank, num_qo_heads, 1, q_len, win, entry)
    if entry == RAGGED:
        # over the new tokens' K/V, in the query dtype
        return PhaseCall(2, DTYPE[query_dtype], DTYPE[query_dtype], DTYPE[out_dtype], head_dim_qk, head_dim_vo,
                         num_qo_heads, num_kv_heads, 0, win, entry)
    return None


def _info_fields(detail: str) -> dict[str, str]:
    i = detail.find("qkvLayout=")
    return dict(p.partition("=")[::2] for p in detail[i:].split(", ")) if i >= 0 else {}


@functools.lru_cache(maxsize=4096)   # pure; asked for every missing shape of a plan
def added_in_0_7(detail: str) -> Optional[str]:
    """Whether a kernel 0.6.18+'s code looks up and the 0.6 table lacks is one its source selects on
    purpose (a family added after pin 158f6fa1): then its own table (pin 2d6a5a02, not public) has it.
    Both families are in the source of every release from 0.6.18 to 0.7.2.post1 (fmhaKernels.cuh
    selectGroupedMlaGenerationKernel / usesGroupedMlaGeneration; decode.py trtllm_batch_decode_with_kv_cache's
    separate_kv default, csrc/trtllm_fmha_kernel_launcher.cu's transform-mode check); the padded MLA tiles
    (getPaddedMlaTileSizeQ) and the H576/V512 CGA kernels are not claimed (the latter is selected only where
    the table has it). None: not shown by the source, so refused (fail closed)."""
    f = _info_fields(detail)
    if (f.get("groupsTokensHeadsQ") == "1" and f.get("headDimQk") == "576" and f.get("headDimV") == "512"
            and f.get("kernelType") == "3" and f.get("tileSizeQ") == "64"):
        return ("grouped MLA generation kernels (fmhaKernels.cuh selectGroupedMlaGenerationKernel: 576/512, "
                "page 32, 8/16/32 heads, 2+ query tokens, batch <= 16)")
    if f.get("bf16QFp8KvTransformMode") in ("1", "2"):
        return ("bf16-query/e4m3-KV transform kernels (decode.py trtllm_batch_decode_with_kv_cache: "
                "bf16q_fp8kv_transform_mode defaults to separate_kv; fmhaKernels.cuh Bf16QFp8KvTransformMode)")
    return None


def _bf16q_mode(call: PhaseCall) -> int:
    """The bf16q_fp8kv_transform_mode the wrapper passes (0.7): trtllm_batch_decode_with_kv_cache defaults to
    separate_kv (2) for a bf16 query over an e4m3 cache with bf16 output; the MLA decode and the context and
    ragged wrappers pass 0 (mla/_core.py, prefill.py)."""
    if call.entry == DECODE and (call.dtype_q, call.dtype_kv, call.dtype_o) == (
            "BF16", "E4M3", "BF16"):
        return 2
    return 0


def _shapes(call: PhaseCall, capability: int):
    q_lens = PREFILL_Q_LENS if call.mode != 1 else (call.q_len,)
    kv_lens = KV_LENS
    if call.window_left >= 0:   # both sides of the window: the mask turns SlidingOrChunkedCausal past it
        kv_lens = tuple(sorted(set(KV_LENS) | {max(1, call.window_left), call.window_left + 2}))
    for sms in SM_COUNTS.get(capability, (148,)):
        for b in BATCHES:
            for kv in kv_lens:
                for q in q_lens:
                    if call.mode != 1 and q > kv:
                        continue
                    for occ in OCCUPANCY:
                        yield sms, b, q, kv, occ


_ENUMS = {
    "qkvLayout": ("SeparateQkv", "PackedQkv", "PagedKv", "ContiguousKv"),
    "maskType": ("Dense", "Causal", "SlidingOrChunkedCausal", "Custom"),
    "kernelType": ("Context", "Generation", "SwapsMmaAbForGeneration", "KeepsMmaAbForGeneration", "SpecDecodingGeneration"),
    "tileScheduler": ("Static", "Persistent"),
    "multiCtasKvMode": ("Disabled", "GmemReduction", "GmemReductionWithSeparateKernel", "CgaSmemReduction"),
}


@functools.lru_cache(maxsize=4096)   # pure; one per missing shape of a plan
def compact_info(info: str) -> str:
    """FlashInfer's kernel-traits info ("qkvLayout=2, maskType=1, ...") with enum names and without the
    flags that are off: the missing kernel's parameters, readable."""
    i = info.find("qkvLayout=")
    prefix, info = (info[:i], info[i:]) if i >= 0 else ("", info)
    out = []
    for part in info.split(", "):
        k, _, v = part.partition("=")
        if k in _ENUMS and v.isdigit() and int(v) < len(_ENUMS[k]):
            out.append(f"{k}={_ENUMS[k][int(v)]}")
        elif v == "0" and k not in ("numTokensPerPage",):
            continue
        else:
            out.append(part)
    return prefix + ", ".join(out)


def _selection_page(call: PhaseCall, page_size: int, v7: bool) -> int:
    """The page size as the selection sees it: pages that select the same kernel at every shape share one
    value, so ``_outcomes`` is computed once for them. Exact, from select.py (= fmhaKernels.cuh):
    * ragged (mode 2): the launcher passes no page (RunnerParams.tokens_per_page = 0);
    * paged, the same head dim for QK and V, a power-of-two page >= 128 and (0.6.18+ or a GQA group > 1):
      selectNumTokensPerPage turns it into the dynamic 128-token page (SelectParams.tokens_per_page = 128,
      dynamicNumTokensPerPage); the runner's page is read nowhere else but usesGroupedMlaGeneration
      (== 32: false for them all) and the non-power-of-two error (not raised for them)."""
    if call.mode == 2:
        return 0
    if (page_size >= 128 and page_size & (page_size - 1) == 0 and call.head_dim_qk == call.head_dim_v
            and call.num_heads_kv > 0 and (v7 or call.num_heads_q // call.num_heads_kv > 1)):
        return 128
    return page_size


def _shape_independent_context(call: PhaseCall) -> bool:
    """A context / ragged call whose kernel depends on the serving shape only through whether the KV length
    passes the window (select.py, = fmhaKernels.cuh): kernelType Context with multiCtasKvMode Disabled never
    takes selectKernel's generation heuristics nor computeCtaAndClusterConfig's multi-CTA branch (so run()
    converges in one pass and never takes the CGA fallback); batch, query length and SM count are then read
    only by the MLA-generation head-dim split (head dims 576/512 or 320/256, excluded here); the KV length
    only by the sliding-window mask switch (maxSeqLenKv > mAttentionWindowSize)."""
    return call.mode in (0, 2) and (call.head_dim_qk, call.head_dim_v) not in ((576, 512), (320, 256))


@functools.lru_cache(maxsize=256)
def _shape_groups(call_mode: int, q_len: int, window_left: int, capability: int, ctx_only: bool
                  ) -> tuple[tuple[tuple[int, int, int, int, int], ...], tuple[tuple[int, int, object], ...]]:
    """``_shapes`` and its groups: (i, j, key) for the shapes [i, j) that differ only by occupancy (one
    selection, KernelFamily.run_occupancies); ``key``: the selection they share (a context call that
    reads the shape only through the window test: its side of the window, ``_shape_independent_context``)."""
    call = PhaseCall(call_mode, "", "", "", 0, 0, 1, 1, q_len, window_left)
    window_size = sel.INT_MAX if window_left == -1 else window_left + 1
    shapes = tuple(_shapes(call, capability))
    groups = []
    i = 0
    while i < len(shapes):
        j = i + 1
        while j < len(shapes) and shapes[j][:4] == shapes[i][:4]:
            j += 1
        occs = tuple(sh[4] for sh in shapes[i:j])
        groups.append((i, j, (shapes[i][3] > window_size, occs) if ctx_only else i))
        i = j
    return shapes, tuple(groups)


def _selections(call: PhaseCall, capability: int, sel_page: int, code: str, table: KernelTable):
    """(shapes, groups, the launcher's answers per group key): each distinct selection computed once (the
    occupancies of one shape together; a shape-independent context call once per side of the window;
    select.launch_grid's memo of what selectKernel answers without reading the shape)."""
    shapes, groups = _shape_groups(call.mode, call.q_len, call.window_left, capability,
                                   _shape_independent_context(call))
    todo: dict[object, tuple[int, int, int, int, tuple[int, ...]]] = {}
    for i, j, key in groups:
        if key not in todo:
            sms, b, q, kv, _ = shapes[i]
            todo[key] = (b, max(1, q), kv, sms, tuple(sh[4] for sh in shapes[i:j]))
    got = dict(zip(todo, sel.launch_grid(
        table, code, mode=call.mode, sm=capability, dtype_q=call.dtype_q, dtype_kv=call.dtype_kv,
        dtype_o=call.dtype_o, head_dim_qk=call.head_dim_qk, head_dim_v=call.head_dim_v, page_size=sel_page,
        num_heads_q=call.num_heads_q, num_heads_kv=call.num_heads_kv, shapes=list(todo.values()),
        window_left=call.window_left, bf16q_mode=_bf16q_mode(call), memo={})))
    return shapes, groups, got


@functools.lru_cache(maxsize=4096)
def decide(call: PhaseCall, capability: int, page_size: int, flashinfer_version: str,
           table: Optional[KernelTable] = None) -> Optional[Decision]:
    """The kernel FlashInfer loads for ``call`` at every serving shape on a ``capability`` GPU, or what is
    missing. None: this flashinfer version's selection is not known here."""
    known = code_for(flashinfer_version)
    if known is None:
        return None
    code, label, pin = known
    t = table if table is not None else shipped(pin)
    werr = wrapper_error(call.entry, call.dtype_q, call.dtype_o, call.head_dim_qk, call.head_dim_v,
                         dtype_kv=call.dtype_kv, page_size=page_size, num_heads_q=call.num_heads_q, code=code)
    if werr is not None:
        return Decision(None, None, (), f"the wrapper refuses the call: {werr}", _table_label(t), label)
    c = sel.resolve(code)
    funcs, sha, misses, assumed = _aggregate(call, capability, _selection_page(call, page_size, c.v7), code, t)
    missing = None
    if misses:
        detail, (_, first) = max(misses.items(), key=lambda kv_: kv_[1][0])
        where = ("every serving shape" if not funcs and not assumed
                 else f"{sum(n for n, _ in misses.values())} serving shapes (e.g. {first})")
        missing = (f"no kernel for Q {call.dtype_q} / KV {call.dtype_kv} / O {call.dtype_o}, head {call.head_dim_qk}/"
                   f"{call.head_dim_v}, page {page_size}, {call.num_heads_q}/{call.num_heads_kv} heads on SM {capability} "
                   f"at {where}: {detail}")
    top = max(funcs, key=funcs.get) if funcs else None   # type: ignore[arg-type]
    return Decision(top, sha.get(top) if top else None, tuple(sorted(funcs)), missing, _table_label(t), label,
                    tuple(sorted(assumed)), tuple(sha[f] for f in sorted(funcs)))


@functools.lru_cache(maxsize=4096)
def _aggregate(call: PhaseCall, capability: int, sel_page: int, code: str, table: KernelTable
               ) -> tuple[dict[str, int], dict[str, str], dict[str, list], frozenset[str]]:
    """Over the serving shapes (``_outcomes``): how many load each kernel, their sha256, what is missing
    and at which shapes, the families assumed from the source. Shared by the pages ``_selection_page``
    does not tell apart (read only by ``decide``)."""
    t = table
    funcs: dict[str, int] = {}
    sha: dict[str, str] = {}
    misses: dict[str, list] = {}   # detail -> [shapes missing it, the first of them]
    assumed: set[str] = set()
    c = sel.resolve(code)
    foreign = c.v7 and t.pin == PIN_0_6   # 0.6.18+'s code over the 0.6.13 table
    shapes, groups, got = _selections(call, capability, sel_page, code, t)
    if all(s.ok for sels in got.values() for s in sels):
        # a kernel at every shape: count each key's answers once per group that shares it (keys in the
        # order they first occur, so the counts' order is the shapes')
        mult: dict[object, int] = {}
        for _, _, key in groups:
            mult[key] = mult.get(key, 0) + 1
        for key, sels in got.items():
            for s in sels:
                funcs[s.function] = funcs.get(s.function, 0) + mult[key]   # type: ignore[index]
                sha[s.function] = s.sha256   # type: ignore[index]
        return funcs, sha, misses, frozenset(assumed)
    outcomes = [(shapes[k], s) for i, j, key in groups for k, s in zip(range(i, j), got[key])]
    for (sms, b, q, kv, occ), s in outcomes:
        if s.ok:
            funcs[s.function] = funcs.get(s.function, 0) + 1   # type: ignore[index]
            sha[s.function] = s.sha256   # type: ignore[index]
        else:
            if foreign and (why := added_in_0_7(s.detail)) is not None:
                assumed.add(why)
                continue
            detail = compact_info(s.detail) if s.kind == "MISS" or "not found: " in s.detail else s.detail
            seen = misses.get(detail)
            if seen is None:   # the message names the first shape of the most frequent miss
                misses[detail] = [1, f"batch {b}, q_len {max(1, q)}, kv_len {kv}, {sms} SMs"
                                     + ("" if occ else ", CGA occupancy fallback")]
            else:
                seen[0] += 1
    return funcs, sha, misses, frozenset(assumed)


def for_config(entry_point: str, config: object, *, query_dtype: str, output_dtype: str, capability: int,
               page_size: int, flashinfer_version: str, table: Optional[KernelTable] = None) -> Optional[Decision]:
    """``decide`` for a plan's phase: ``config`` is an AttentionConfig (kv_dtype, qk_head_dim, vo_head_dim,
    num_qo_heads, kv_heads, num_speculative_tokens, sliding_window, kv_lora_rank, qk_rope_head_dim);
    query/output dtypes as the PhasePlan spells them (config or torch names). None: not a trtllm-gen entry
    point, or not decided for this version."""
    c = config
    try:
        call = phase_call(entry_point, query_dtype=query_dtype, kv_dtype=c.kv_dtype, out_dtype=output_dtype,  # type: ignore[attr-defined]
                          head_dim_qk=c.qk_head_dim, head_dim_vo=c.vo_head_dim, num_qo_heads=c.num_qo_heads,  # type: ignore[attr-defined]
                          num_kv_heads=c.kv_heads, num_speculative_tokens=c.num_speculative_tokens,  # type: ignore[attr-defined]
                          sliding_window=c.sliding_window, kv_lora_rank=c.kv_lora_rank,  # type: ignore[attr-defined]
                          qk_rope_head_dim=c.qk_rope_head_dim)  # type: ignore[attr-defined]
    except KeyError:
        return None
    if call is None:
        return None
    return decide(call, capability, page_size, flashinfer_version, table)

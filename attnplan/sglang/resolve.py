"""SGLang 0.5.23's attention resolution, as a pure function over (flags, model, platform, tables).

The steps run in the order of sglang/srt/arg_groups/pipeline.py ``run_resolution_pipeline`` (model
overrides and model_hook.py's asserts -> deterministic inference -> NVFP4 ->
``handle_attention_backend_compatibility`` (cutedsl_mla's fill included) -> FP4 KV checks -> page size
default -> speculative_hook.py ``_handle_eagle_family``), then the backend factories of layers/attention/
attention_registry.py and its ``attn_backend_wrapper`` (backend build). SGLang raises at its first failure, so a refusal stops the
resolution: one refusal, with the phase at which SGLang fails (``outcome``). Every step names its rule
(rules/packs/sglang.yaml); the tables come from rules/backends.yaml ``engines.sglang.native``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from attnplan.policy.answer import Coercion, EngineBackend, EngineRef, Violation
from attnplan.policy.config import AttentionConfig
from attnplan.policy.engines import EngineResolution
from attnplan.policy.facts import NodeFacts
from attnplan.policy.rulepack import RuleSet, SelectionRow

from .data import DefaultRow, NativeSpec, native
from .flags import KV_DTYPES, SglangEngine, SglangFlags
# The model's half of the request, beside the resolver backends.yaml names (engines.sglang.resolver): a model
# plan hands config.json to it so SGLang's model overrides see the architecture (issue 39).
from .flags import request_for_model as request_for_model

PHASES = ("prefill", "decode")
# When the node's torch CUDA is unknown (a simulated node): assumed, not read - every Blackwell path
# of SGLang needs >= 12.8, and the answer says it assumed it.
ASSUMED_CUDA = (12, 8)


@dataclass(frozen=True)
class Platform:
    capability: int                  # M*10+m
    cuda: tuple[int, int]
    cuda_known: bool = True

    @property
    def major(self) -> int:
        return self.capability // 10


@dataclass(frozen=True)
class ModelFacts:
    """What SGLang's ModelConfig tells the resolution (configs/model_config.py)."""

    is_mla: bool = False
    sinks: bool = False
    asymmetric_kv: bool = False      # has_asymmetric_kv: head_dim != v_head_dim (standard attention)
    group_size: int = 1              # query heads per KV head on one rank
    architecture: Optional[str] = None

    @classmethod
    def from_config(cls, c: AttentionConfig, architecture: Optional[str] = None) -> "ModelFacts":
        return cls(is_mla=c.is_mla, sinks=bool(c.sinks), asymmetric_kv=(not c.is_mla and c.qk_head_dim != c.vo_head_dim),
                   group_size=c.group_size if c.num_qo_heads % c.kv_heads == 0 else 1, architecture=architecture)


@dataclass(frozen=True)
class Refusal:
    rule: str
    outcome: str                     # startup | backend-build
    phase: str                       # prefill | decode | both
    backend: Optional[str]
    message: str


@dataclass
class Resolution:
    """What SGLang runs: its backend per phase (its vocabulary), the page size, what it changed silently."""

    prefill: Optional[str] = None
    decode: Optional[str] = None
    attention_backend: Optional[str] = None
    page_size: Optional[int] = None
    kv_cache_dtype: Optional[str] = None             # what SGLang runs (an alias may set it)
    coercions: list[Coercion] = field(default_factory=list)
    refusal: Optional[Refusal] = None
    steps: list[str] = field(default_factory=list)    # rule ids applied, in order

    @property
    def ok(self) -> bool:
        return self.refusal is None


class _Refused(Exception):
    def __init__(self, refusal: Refusal):
        self.refusal = refusal


def platform_of(node: NodeFacts) -> Optional[Platform]:
    """SGLang's platform view of the node; None when the capability is unknown (no device)."""
    cap = node.capability.value
    if not isinstance(cap, int):
        return None
    raw = node.torch_cuda_version.value
    if raw:
        try:
            parts = tuple(int(x) for x in str(raw).split(".")[:2])
            return Platform(cap, (parts + (0,))[:2] if len(parts) == 1 else parts)  # type: ignore[arg-type]
        except ValueError:
            pass
    return Platform(cap, ASSUMED_CUDA, cuda_known=False)


def _is(p: Platform, tables: NativeSpec, name: str) -> bool:
    """utils/common.py _check_cuda_device_version: the capability major and the minimum CUDA."""
    spec = tables.platform[name]
    need = tuple(int(x) for x in spec.cuda.split("."))
    return p.major in spec.majors and p.cuda >= need


def _no_spec_or_topk_one(f: SglangFlags) -> bool:
    # utils/common.py is_no_spec_infer_or_topk_one (the user's page size: it runs before any coercion)
    return f.speculative_eagle_topk is None or (f.speculative_eagle_topk == 1 and f.page_size in (None, 1))


def _row_holds(row: DefaultRow, p: Platform, t: NativeSpec, f: SglangFlags, m: ModelFacts) -> bool:
    if row.platform is not None:
        names = [row.platform] if isinstance(row.platform, str) else row.platform
        if not any(_is(p, t, n) for n in names):
            return False
    if row.no_spec_or_topk_one is not None and _no_spec_or_topk_one(f) != row.no_spec_or_topk_one:
        return False
    if row.spec_topk_declared is not None:
        declared = (f.speculative_algorithm is None or f.speculative_eagle_topk is not None    # model_override_base.py
                    or str(f.speculative_algorithm).upper() in {a.algorithm for a in t.forces_topk_one})  # _forces_eagle_topk_one
        if declared != row.spec_topk_declared:
            return False
    if row.asymmetric_kv is not None and m.asymmetric_kv != row.asymmetric_kv:
        return False
    if row.sinks is not None and m.sinks != row.sinks:
        return False
    if row.deepseek is not None and (m.architecture in t.deterministic.deepseek) != row.deepseek:
        return False
    if row.speculative is not None and (f.speculative_algorithm is not None) != row.speculative:
        return False
    if row.default_backend is not None and \
            _first(t.default["mla" if m.is_mla else "standard"], p, t, f, m) != row.default_backend:
        return False   # model_overrides/qwen3_5.py asks get_default_attn_backend first
    return True


def _first_row(rows: list[DefaultRow], p: Platform, t: NativeSpec, f: SglangFlags, m: ModelFacts) -> Optional[DefaultRow]:
    for row in rows:
        if _row_holds(row, p, t, f, m):
            return row
    return None


def _first(rows: list[DefaultRow], p: Platform, t: NativeSpec, f: SglangFlags, m: ModelFacts) -> Optional[str]:
    row = _first_row(rows, p, t, f, m)
    return row.backend if row is not None else None


def resolve(flags: SglangFlags, model: ModelFacts, p: Platform, t: NativeSpec, *, build: bool = True) -> Resolution:
    """SGLang's resolution of these flags for this model on this platform (see the module doc);
    ``build=False`` stops after the argument pipeline (before the backend factories)."""
    r = Resolution(page_size=flags.page_size)
    try:
        _run(flags, model, p, t, r, build)
    except _Refused as exc:
        r.refusal = exc.refusal
    return r


def _refuse(rule: str, message: str, *, outcome: str = "startup", phase: str = "both", backend: Optional[str] = None) -> None:
    raise _Refused(Refusal(rule, outcome, phase, backend, message))


def _run(f: SglangFlags, m: ModelFacts, p: Platform, t: NativeSpec, r: Resolution, build: bool = True) -> None:
    base, pre, dec = f.attention_backend, f.prefill_attention_backend, f.decode_attention_backend
    kv = f.kv_cache_dtype

    def mark() -> None:  # the backends resolved so far: what a refusal names
        r.attention_backend, r.prefill, r.decode = base, pre or base, dec or base

    page = f.page_size
    # 0. serving_hook.py handle_deprecated_args: deprecated backend names (tables: aliases)
    for al in t.aliases:
        if al.name not in (base, pre, dec):
            continue
        named_base_or_decode = al.name in (base, dec)
        base, dec = (al.to if b == al.name else b for b in (base, dec))
        if pre == al.name:
            pre = al.prefill_to
        _coerce(r, "attention_backend", al.name, al.to, al.rule,
                f"--attention-backend {al.name} is a deprecated alias: SGLang runs {al.to} (prefill {pre or base})")
        if named_base_or_decode and al.kv_cache_dtype is not None and kv != al.kv_cache_dtype:
            _coerce(r, "kv_cache_dtype", kv, al.kv_cache_dtype, al.rule,
                    f"{al.name} implies an {al.kv_cache_dtype} KV cache: SGLang changes kv_cache_dtype {kv} to "
                    f"{al.kv_cache_dtype}")
            kv = al.kv_cache_dtype
    r.kv_cache_dtype = kv
    mark()
    # 1. model_hook.py handle_model_specific_adjustments: the architecture's override, then its assert.
    spec = t.models.get(m.architecture or "")
    if spec is not None:
        # is_attention_backend_not_set (all three flags) or ``cfg.attention_backend is None`` (the override's own test)
        if base is None and (spec.unset == "base" or (pre is None and dec is None)):
            row = _first_row(spec.default, p, t, f, m)
            if row is not None:
                base = row.backend
                r.steps.append(spec.rule)
                if row.page_size is not None and row.page_size != page:
                    # the declaration is the last writer over the user's --page-size (ResolvedView's overlay)
                    if page is not None or row.page_size != t.default_page_size:
                        _coerce(r, "page_size", page, row.page_size, spec.rule,
                                f"{m.architecture} on this GPU runs {base} with pages of {row.page_size}: SGLang "
                                f"changes page_size {'unset' if page is None else page} to {row.page_size}")
                    page = row.page_size
        mark()
        if spec.allowed is not None:
            pp, dd = pre or base, dec or base
            if spec.assert_on == "base":
                if base not in spec.allowed:
                    _refuse(spec.rule, f"{', '.join(spec.allowed)} is required for {m.architecture} but got {base} "
                            f"(AssertionError)", backend=base)
            elif pp not in spec.allowed or dd not in spec.allowed:
                _refuse(spec.rule, f"{m.architecture} requires one of {spec.allowed} attention backends, but got "
                        f"prefill {pp}, decode {dd} (AssertionError)", backend=f"{pp}/{dd}")

    mark()
    # 2. overrides.py _deterministic_attention_backend
    if f.enable_deterministic_inference:
        if base is None:
            base = _first(t.deterministic.default, p, t, f, m)
            r.steps.append("sglang.deterministic")
        elif base not in t.deterministic.allowed:
            _refuse("sglang.deterministic", f"only {t.deterministic.allowed} attention backends support deterministic "
                    f"inference, but '{base}' was given", backend=base)
        # attention_hook.py handle_deterministic_inference: absorbed-MLA models
        if m.architecture in t.deterministic.absorbed_mla:
            mark()
            if base not in t.deterministic.radix_supported:
                _refuse("sglang.deterministic", f"only {t.deterministic.radix_supported} attention backends support "
                        f"deterministic inference with absorbed-MLA models, but {base} is used", backend=base)
            if base == "fa4" and not _is(p, t, "is_sm100_or_sm110"):
                _refuse("sglang.deterministic", "deterministic inference with absorbed-MLA models on fa4 requires "
                        "SM100/SM110", backend=base)

    mark()
    # 3. kv_cache_hook.py handle_nvfp4_prefill_kv_dequant_dtype
    if kv == "nvfp4":
        sm100 = _is(p, t, "is_sm100")
        explicit = pre or base
        by_backend = {"flashinfer": "fp8_e4m3", "trtllm_mha": "nvfp4"}
        if explicit in by_backend:
            dequant = by_backend[explicit]
        elif explicit is not None:
            _refuse("sglang.nvfp4-backends", f"NVFP4 prefill supports an FP8 E4M3 workspace or native NVFP4, but "
                    f"backend {explicit!r} provides neither", backend=explicit)
        else:
            dequant = "nvfp4" if sm100 else "fp8_e4m3"
        if dequant == "nvfp4" and not sm100:
            _refuse("sglang.nvfp4-backends", "native NVFP4 prefill requires SM100", backend="trtllm_mha")
        target = {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}[dequant]
        if pre is not None and pre != target:
            _refuse("sglang.nvfp4-backends", f"NVFP4 prefill dequant dtype {dequant} requires prefill backend "
                    f"{target!r}, but --prefill-attention-backend={pre!r} was set", phase="prefill", backend=pre)
        if dec not in (None, "trtllm_mha"):
            _refuse("sglang.nvfp4-backends", f"NVFP4 decode requires --decode-attention-backend=trtllm_mha; got {dec!r}",
                    phase="decode", backend=dec)
        pre, dec = target, "trtllm_mha"
        r.steps.append("sglang.nvfp4-backends")

    # 4. attention_hook.py handle_attention_backend_compatibility
    # 4a. overrides.py _attention_backend_default
    if pre is not None and pre == dec:
        base = pre
    elif base is None:
        base = _first(t.default["mla" if m.is_mla else "standard"], p, t, f, m)
        r.steps.append("sglang.default-backend")
    if pre is not None or dec is not None:
        r.steps.append("sglang.split-backends")

    def phases() -> tuple[Optional[str], Optional[str]]:   # model_override_base.py attention_backends_of
        return pre or base, dec or base

    # 4b. overrides.py _mla_backend_page_constraints (the user's page, an unset one included)
    for name, ps in t.pages.items():
        if ps.standard_only:
            continue
        used = {"flashmla": (base, dec), "trtllm_mla": (base, dec)}.get(name, (base, dec, pre))
        if name in used and page not in ps.allowed:
            _coerce(r, "page_size", page, ps.coerce, ps.rule,
                    f"{name} runs pages of {', '.join(map(str, ps.allowed))} only: SGLang changes page_size "
                    f"{'unset' if page is None else page} to {ps.coerce}")
            page = ps.coerce
    for chk in t.mla_backend_checks:   # the same pass, a release's own MLA backend (tables: mla_backend_checks)
        if chk.backend in (base, dec) and page not in chk.pages:
            _coerce(r, "page_size", page, chk.coerce, chk.rule,
                    f"{chk.backend} runs pages of {', '.join(map(str, chk.pages))} only: SGLang changes page_size "
                    f"{'unset' if page is None else page} to {chk.coerce}")
            page = chk.coerce
    mark()
    # 4c. overrides.py _mla_kv_cache_dtype_checks
    if "trtllm_mla" in (base, dec):
        if not _is(p, t, "is_blackwell"):
            _refuse("sglang.trtllm-mla-dtypes", "the TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x)",
                    backend="trtllm_mla")
        if kv not in ("fp8_e4m3", "bf16", "auto"):
            _refuse("sglang.trtllm-mla-dtypes", f"TensorRT-LLM MLA only supports kv-cache-dtype fp8_e4m3, bf16 or auto; got {kv}",
                    backend="trtllm_mla")
    for chk in t.mla_backend_checks:
        if chk.backend in (base, dec):
            if not _is(p, t, chk.platform):
                _refuse(chk.rule, f"{chk.backend} backend is only supported on {chk.platform} GPUs", backend=chk.backend)
            if kv not in chk.kv_dtypes:
                _refuse(chk.rule, f"{chk.backend} backend requires kv-cache-dtype={', '.join(chk.kv_dtypes)}, got {kv}",
                        backend=chk.backend)
    mark()
    # 4c'. overrides.py _cutedsl_prefill_backend_fill
    cs = t.cutedsl_mla
    if "cutedsl_mla" in (base, pre, dec):
        if pre == "cutedsl_mla":
            _refuse(cs.rule, "CuteDSL MLA only supports decoding for now (AssertionError)", phase="prefill",
                    backend="cutedsl_mla")
        if not _is(p, t, cs.platform):
            _refuse(cs.rule, "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100)", backend="cutedsl_mla")
        if kv not in cs.kv_dtypes:
            _refuse(cs.rule, f"CuteDSL MLA backend only supports kv-cache-dtype of {', '.join(cs.kv_dtypes)}; got {kv}",
                    backend="cutedsl_mla")
        if pre is None:
            pre = cs.prefill_fill
            r.steps.append(cs.rule)
    mark()
    # 4d. the trtllm_mha capability checks
    pp, dd = phases()
    trt_ok = _is(p, t, "is_sm90") or _is(p, t, "is_sm100") or _is(p, t, "is_sm120")
    if pp == "trtllm_mha" and not trt_ok:
        _refuse("sglang.trtllm-mha-capability", "the TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell "
                "(SM100) or SM120 GPUs", phase="prefill", backend=pp)
    if pp == "trtllm_mha" and _is(p, t, "is_sm120") and kv == "fp8_e4m3":
        _refuse("sglang.trtllm-mha-sm120-fp8", "TRTLLM FMHAv2 prefill on SM120 does not support an fp8_e4m3 KV cache",
                phase="prefill", backend=pp)
    if dd == "trtllm_mha" and not trt_ok:
        _refuse("sglang.trtllm-mha-capability", "the TRTLLM MHA backend for decode is only supported on Hopper (SM90), "
                "Blackwell (SM100) and SM120 GPUs", phase="decode", backend=dd)
    # 4e. overrides.py _attention_backend_fa3_fp8_fallback (the base backend only)
    if base == "fa3" and kv == "fp8_e5m2":
        _coerce(r, "attention_backend", "fa3", "triton", "sglang.fa3-e5m2",
                "FlashAttention3 takes fp8_e4m3 only if using FP8: SGLang switches attention_backend fa3 to triton")
        base = "triton"
    # 4f. overrides.py _fa4_page_constraint
    fa4 = t.pages.get("fa4")
    if fa4 is not None and "fa4" in (base, pre, dec) and not m.is_mla and _is(p, t, fa4.platform or "is_sm100") \
            and (f.speculative_eagle_topk or 0) <= 1:
        own = next((a.page for a in fa4.architectures if a.architecture == m.architecture), None)
        if own is not None:   # _fa4_page_constraint returns this architecture's own page (the last writer)
            if page != own:
                _coerce(r, "page_size", page, own, fa4.rule, f"{m.architecture} runs fa4 with pages of {own}: SGLang "
                        f"changes page_size {'unset' if page is None else page} to {own}")
            page = own
        elif page not in fa4.allowed:
            _coerce(r, "page_size", page, fa4.coerce, fa4.rule,
                    f"FA4 runs pages of {fa4.coerce} for standard attention: SGLang changes page_size "
                    f"{'unset' if page is None else page} to {fa4.coerce}")
        if own is None:
            page = fa4.coerce

    mark()
    # 5. kv_cache_hook.py handle_kv4_compatibility
    if kv == "nvfp4" and not (_is(p, t, "is_sm100") or _is(p, t, "is_sm120")):
        _refuse("sglang.nvfp4-capability", "--kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120 (RuntimeError)")
    if kv == "nvfp4":
        pp, dd = phases()
        if pp == "fa4" or pp == dd:   # split phases (other than fa4 prefill) only warn
            key, which, value = (("fa4_prefill_", "decode_attention_backend", dd) if pp == "fa4"
                                 else ("", "attention_backend", base))
            allowed = t.kv4[key + ("mla" if m.is_mla else "standard")]  # type: ignore[literal-required]
            if value not in allowed:
                _refuse("sglang.nvfp4-backends", f"KV4 {'MLA' if m.is_mla else 'MHA'} expects {which} to be one of "
                        f"{allowed}, but got {value} (AssertionError)", backend=value)

    # 6. overrides.py _page_size_default
    if page is None:
        page = t.default_page_size
        r.steps.append("sglang.page-default")
    # 7. speculative_hook.py _handle_eagle_family (handle_speculative_decoding runs after the page default)
    e = t.eagle
    algo = str(f.speculative_algorithm).upper() if f.speculative_algorithm else None
    if algo in e.algorithms:
        topk = f.speculative_eagle_topk
        if topk is None and f.speculative_num_steps is None:   # _auto_choose_speculative_params
            topk = e.default_auto_topk if algo == "STANDALONE" else e.auto_topk.get(m.architecture or "", e.default_auto_topk)
            r.steps.append(e.rule)
        hit = [b for b in phases() if b in e.backends]
        if topk is not None and topk > e.refuse_topk_above and hit:
            _refuse(e.rule, f"{hit[0]} backend only supports topk = 1 for speculative decoding; EAGLE top-k is {topk}"
                    + ("" if f.speculative_eagle_topk is not None else
                       f" (SGLang's automatic choice for {m.architecture or 'this model'} with no --speculative-num-steps)"),
                    backend=hit[0])

        # topk > 1 with pages > 1 needs the two-pass cascade draft decode: the base backend must implement it
        if topk is not None and topk > e.refuse_topk_above and page > 1 and base not in e.page_tree_backends:
            _refuse(e.page_rule, f"speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                    f"{tuple(e.page_tree_backends)}; got attention_backend={base!r}", backend=base)

    r.page_size = page
    r.attention_backend = base
    r.prefill, r.decode = phases()

    # 8. layers/attention/attention_registry.py: the backend factories, when the model runner builds them.
    if not build:
        return
    for phase, b in (("prefill", r.prefill), ("decode", r.decode)):
        if b == "fa3" and not ((p.major == 8 and not m.is_mla) or p.major == 9):
            _refuse("sglang.fa3-capability", "FlashAttention v3 Backend requires SM>=80 and SM<=90 (AssertionError)",
                    outcome="backend-build", phase=phase, backend=b)
        if b == "trtllm_mha" and m.is_mla:
            _refuse("sglang.trtllm-mha-mla", "trtllm_mha backend can only be used with non-MLA models",
                    outcome="backend-build", phase=phase, backend=b)
        chk = next((c for c in t.mla_backend_checks if c.backend == b and c.mla_only), None)
        if chk is not None and not m.is_mla:
            _refuse(chk.rule, f"{b} backend can only be used with MLA models", outcome="backend-build", phase=phase,
                    backend=b)
        if b == "trtllm_mla" and not m.is_mla:
            _refuse("sglang.trtllm-mha-mla", "trtllm_mla backend can only be used with MLA models",
                    outcome="backend-build", phase=phase, backend=b)
    # attention_registry.py attn_backend_wrapper: hybrid GDN models on Blackwell
    if spec is not None and spec.hybrid_gdn and _is(p, t, "is_blackwell"):
        gdn = t.hybrid_gdn
        allowed = gdn.sm120 if _is(p, t, "is_sm120") else gdn.blackwell
        if r.prefill not in allowed or r.decode not in allowed:
            _refuse(gdn.rule, f"Only {allowed} backends are supported on Blackwell GPUs for hybrid GDN models. Got "
                    f"prefill={r.prefill}, decode={r.decode} (AssertionError)", outcome="backend-build",
                    phase="prefill" if r.prefill not in allowed else "decode",
                    backend=r.prefill if r.prefill not in allowed else r.decode)
    xqa = _is(p, t, "is_sm90") or _is(p, t, "is_sm120")
    if "trtllm_mha" in (r.prefill, r.decode) and page >= 128 and not xqa:
        if m.group_size <= 1 or m.asymmetric_kv or page & (page - 1):
            _refuse("sglang.trtllm-mha-page128", f"trtllm_mha with page_size={page} requires GQA with equal QK/V head "
                    f"dims and a power-of-2 page (group {m.group_size})", outcome="backend-build", backend="trtllm_mha")


def _coerce(r: Resolution, fld: str, given: Any, runs: Any, rule: str, message: str) -> None:
    r.coercions.append(Coercion(field=fld, given=given, runs=runs, rule=rule, message=message))
    r.steps.append(rule)


# -- the FlashInfer side ------------------------------------------------------------------------
def phase_backend(name: Optional[str], kind: str, phase: str, major: int, t: NativeSpec) -> tuple[EngineBackend, Optional[list[str]]]:
    """SGLang's backend for one phase, said plainly, and the FlashInfer candidates it runs (None: none)."""
    if name is None:
        return EngineBackend(name="none", runs_flashinfer=False, note="no backend resolved"), None
    spec = t.backends.get(name)
    if spec is None:
        return EngineBackend(name=name, runs_flashinfer=False,
                             note=f"SGLang's {name} backend is not one attnplan models (no FlashInfer plan of its own)"), None
    if not spec.runs_flashinfer:
        return EngineBackend(name=name, runs_flashinfer=False, source=spec.source, note=spec.runs), None
    rows = (spec.mla if kind == "mla" else spec.standard).get(phase)  # type: ignore[call-overload]
    if not rows:
        return EngineBackend(name=name, runs_flashinfer=False, source=spec.source,
                             note=f"{name} does not serve {'MLA' if kind == 'mla' else 'standard'} attention"), None
    for row in rows:
        if row.capability_major is None or row.capability_major == major:
            if row.candidates:
                return EngineBackend(name=name, runs_flashinfer=True, source=spec.source,
                                     note=f"runs FlashInfer {', '.join(row.candidates)}"
                                          + (f"; {row.also}" if row.also else "")), list(row.candidates)
            return EngineBackend(name=name, runs_flashinfer=False, source=spec.source, note=row.runs or ""), None
    return EngineBackend(name=name, runs_flashinfer=False, source=spec.source, note="no row for this capability"), None


def engine_resolution(rs: RuleSet, ref: EngineRef, config: AttentionConfig, node: NodeFacts,
                      request: object = None) -> EngineResolution:
    """The resolver backends.yaml names for ``engines.sglang``: SGLang's flags (the request's, else the
    ones the attention config implies) resolved, and the FlashInfer candidates per phase."""
    t = native(rs, ref.name, ref.version)
    # SGLang's own flags (backend names, architecture, EAGLE top-k) come with the request; the values an
    # attention config also holds (KV dtype, page size, deterministic mode, speculation) are read from the
    # config, so a suggestion that changes one is re-resolved by SGLang's rules too.
    base_flags = getattr(request, "flags", None) or SglangFlags()
    flags = base_flags.with_(
        kv_cache_dtype={"fp8": "fp8_e4m3"}.get(config.kv_cache_dtype, config.kv_cache_dtype),
        page_size=config.page_size, enable_deterministic_inference=config.batch_invariant is True,
        speculative_algorithm=base_flags.speculative_algorithm or ("EAGLE" if config.num_speculative_tokens else None))
    p = platform_of(node)
    kind = "mla" if config.is_mla else "standard"
    if p is None:  # no device: the kernel rules refuse (device.cuda); SGLang picks nothing
        unknown = EngineBackend(name="unknown", runs_flashinfer=False, note="SGLang's pick needs the device capability")
        return EngineResolution(config=config, selection={kind: {ph: [SelectionRow(candidates=phase_backend(
            "flashinfer", kind, ph, 0, t)[1] or ["fa2"])] for ph in PHASES}}, engine_backend=unknown,
            engine_phases={ph: unknown for ph in PHASES}, notes=("sglang: no device capability, so no SGLang backend pick",))
    m = ModelFacts.from_config(config, flags.architecture)
    r = resolve(flags, m, p, t)
    notes: list[str] = []
    if not p.cuda_known:
        notes.append(f"sglang: the node's torch CUDA is unknown; assumed CUDA {p.cuda[0]}.{p.cuda[1]} for SGLang's platform checks")
    violations: tuple[Violation, ...] = ()
    phases: dict[str, EngineBackend] = {}
    selection: dict[str, dict[str, list[SelectionRow]]] = {kind: {}}
    fi_default = {ph: phase_backend("flashinfer", kind, ph, p.major, t)[1] or [] for ph in PHASES}
    elsewhere: dict[tuple[str, str], list[str]] = {}
    alt_refusal: Optional[Refusal] = None
    if r.ok and not all(phase_backend(n, kind, ph, p.major, t)[1] for ph, n in (("prefill", r.prefill), ("decode", r.decode))):
        # The FlashInfer plan stands for what SGLang runs when asked for flashinfer: say so when SGLang refuses that.
        alt_refusal = resolve(flags.with_(attention_backend="flashinfer", prefill_attention_backend=None,
                                          decode_attention_backend=None), m, p, t).refusal
    for ph, name in (("prefill", r.prefill), ("decode", r.decode)):
        eb, cands = phase_backend(name, kind, ph, p.major, t)
        if cands is None and alt_refusal is not None:
            eb = eb.model_copy(update={"note": f"{eb.note}; SGLang refuses --attention-backend flashinfer here at "
                                               f"{alt_refusal.outcome} [{alt_refusal.rule}]"})
        phases[ph] = eb
        if cands is None:
            cands = fi_default[ph]
            if name is not None:
                elsewhere.setdefault((name, eb.note), []).append(ph)
        selection[kind][ph] = [SelectionRow(candidates=cands)]
    for (name, what), phs in elsewhere.items():
        where = " and ".join(phs)
        notes.append(f"sglang: {where} run{'s' if len(phs) == 1 else ''} {name} ({what}); the FlashInfer plan for {where} "
                     f"is what SGLang runs with --attention-backend flashinfer")
    if config.attention_backend != "auto":
        rule = rs.rule("sglang.backend-names")
        violations += (Violation(rule=rule.id, phase="both", fact="config.attention_backend", observed=config.attention_backend,
                                 required="SGLang's own backend flags", layer="engine", fix=rule.fix,
                                 message=f"attention_backend={config.attention_backend} names a FlashInfer backend; SGLang "
                                         f"takes its own names (--attention-backend flashinfer, trtllm_mha, ...)"),)
    if flags.kv_cache_dtype not in KV_DTYPES:
        rule = rs.rule("sglang.kv-names")
        violations += (Violation(rule=rule.id, phase="both", fact="config.kv_cache_dtype", observed=flags.kv_cache_dtype,
                                 required=", ".join(KV_DTYPES), layer="engine", fix=rule.fix,
                                 message=f"SGLang has no --kv-cache-dtype {flags.kv_cache_dtype}"),)
    if r.refusal is not None:
        rf = r.refusal
        rule = rs.rule(rf.rule)
        violations += (Violation(rule=rf.rule, phase=rf.phase, backend=rf.backend,  # type: ignore[arg-type]
                                fact="sglang.attention_backend", observed=rf.backend,
                                required=rule.title, message=f"SGLang {ref.version} refuses at {rf.outcome}: {rf.message}",
                                fix=rule.fix, layer="engine", outcome=rf.outcome),)  # type: ignore[arg-type]
    for c in r.coercions:
        notes.append(f"sglang: [{c.rule}] {c.message} (silently)")
    same = r.prefill == r.decode
    name = (r.prefill or "none") if same else f"prefill={r.prefill},decode={r.decode}"
    runs = all(eb.runs_flashinfer for eb in phases.values())
    engine_backend = EngineBackend(
        name=name, runs_flashinfer=runs, source="sglang/srt/arg_groups/pipeline.py run_resolution_pipeline",
        note=(f"SGLang {ref.version} selects {name} here: the FlashInfer plan below is what it runs" if runs else
              f"SGLang {ref.version} selects {name} here, which runs kernels that are not FlashInfer's in "
              + " and ".join(ph for ph, eb in phases.items() if not eb.runs_flashinfer)
              + "; the FlashInfer plan there is what SGLang runs with --attention-backend flashinfer"))
    cfg = config.replace(page_size=r.page_size)
    if r.kv_cache_dtype is not None and r.kv_cache_dtype != flags.kv_cache_dtype:   # an alias's KV dtype (coerced)
        cfg = cfg.replace(kv_cache_dtype=KV_DTYPES.get(r.kv_cache_dtype, r.kv_cache_dtype))
    return EngineResolution(config=cfg, selection=selection, engine_backend=engine_backend, engine_phases=phases,
                            coercions=tuple(r.coercions), violations=violations, notes=tuple(notes))


def backend_alternatives(rs: RuleSet, spec: Any, is_mla: bool, selected: Any) -> list[tuple[str, str, Any]]:
    """SGLang's other backends of the model's kind (backends.yaml engines.sglang.native.backends.<name>.kinds) as
    its own ``--attention-backend`` flag, for the verdict's fixes (policy/api.py fixes_for re-evaluates each)."""
    from attnplan.policy import EngineSpec

    t = native(rs, spec.name, spec.version)
    kind = "mla" if is_mla else "standard"
    base = getattr(spec.request, "flags", None) or SglangFlags()
    out = []
    for name, row in t.backends.items():
        if kind not in row.kinds or (name == selected.decode and selected.prefill == name):
            continue
        request = SglangEngine(flags=base.with_(attention_backend=name), **({"version": spec.version} if spec.version else {}))
        own = "" if row.runs_flashinfer else " (its own kernels: only SGLang's checks are modelled)"
        out.append((f"--attention-backend {name}", f"run SGLang's {name}{own}", EngineSpec(spec.name, spec.version, request)))
    return out

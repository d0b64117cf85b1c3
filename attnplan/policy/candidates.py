"""One candidate backend for one phase, against every applicable check (docs/contract.md, Selection).

``evaluate_candidate`` is the public per-candidate evaluation that ``explain`` and ``matrix`` use;
``evaluate`` (engine.py) runs it for each candidate the selection order names.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from .answer import TraceEntry, Violation
from .conditions import Failure, Leaf
from .engines import EngineLike, active_checks, release_node, resolve_engine
from .config import AttentionConfig
from .facts import NodeFacts
from .facts_catalog import KERNEL_FACTS, PAGE_SIZE, base_context, display
from .rulepack import Check, RuleSet
from .shipped import default_ruleset

_PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[a-z_]+)?)\}")


@dataclass(frozen=True, slots=True)
class PagesJudged:
    """``config.page_size`` as a page-reading check judged it, a trace entry's input (render/trace.py words it):
    ``block`` the engine's block size (None: unset, the plan picks the page from ``passing``: the pages that pass
    every page check) or, where the kernels read the largest kernel page dividing the block
    (``kernel_page: largest_divisor``), ``passing`` the kernel pages dividing it that pass."""

    block: Optional[int]
    passing: tuple[int, ...]


def _message(check: Check, ctx: dict[str, Any], failures: list[Failure]) -> str:
    if check.message:
        return _PLACEHOLDER.sub(lambda m: display(m.group(1), ctx.get(m.group(1))), check.message)
    return "; ".join(f"{f.fact} is {display(f.fact, f.observed) if not isinstance(f.observed, dict) else f.observed}, "
                     f"needs {f.required}" for f in failures) or check.rule.title


def violation(check: Check, ctx: dict[str, Any], phase: str, backend: Optional[str]) -> Violation:
    failures = check.require.failures(ctx)
    first = failures[0] if failures else None
    observed: Any = None
    if first is not None:
        observed = first.observed if isinstance(first.observed, dict) else display(first.fact, first.observed)
    return Violation(
        rule=check.rule.id, phase=phase, backend=backend,  # type: ignore[arg-type]
        fact=first.fact if first else None, observed=observed,
        required=" and ".join(dict.fromkeys(f.required for f in failures)) or check.require.describe(),
        message=_message(check, ctx, failures), fix=check.rule.fix, layer=check.rule.layer,  # type: ignore[arg-type]
    )


@functools.lru_cache(maxsize=None)
def _check_reads(check: Check) -> tuple[str, ...]:
    return tuple(sorted(set(check.require.reads) | (set(check.when.reads) if check.when else set())))


def trace_entry(check: Check, ctx: dict[str, Any], phase: str, backend: Optional[str], verdict: str) -> TraceEntry:
    # Interned display strings: memoised answers share them instead of holding copies.
    inputs = {f: sys.intern(display(f, ctx.get(f))) for f in _check_reads(check)}
    return TraceEntry(rule=check.rule.id, check=check.index, phase=phase, backend=backend,  # type: ignore[arg-type]
                      verdict=verdict, inputs=inputs, required=check.require.describe(),  # type: ignore[arg-type]
                      layer=check.rule.layer)


def reads_page(check: Check) -> bool:
    # The kernel facts depend on the page (FlashInfer's table has kernels per page size): checks reading
    # them are judged per page like those reading config.page_size.
    reads = set(check.require.reads) | (set(check.when.reads) if check.when is not None else set())
    return PAGE_SIZE in reads or any(f in reads for f in KERNEL_FACTS)


def _entry_point(backend: str, phase: str) -> Optional[str]:
    """The FlashInfer function a (backend, phase) calls (backends.yaml ``calls.<phase>.entry_point``)."""
    spec = default_ruleset().backends.get(backend)
    call = spec.calls.get(phase) if spec is not None else None  # type: ignore[union-attr]
    return call.entry_point if call is not None else None


def trtllm_decision(ctx: dict[str, Any], phase: str, backend: str) -> Any:
    """The trtllm-gen kernel this candidate loads at ctx's page (attnplan.kernels.trtllm_gen.phase.decide),
    or None where it is not decided (an entry point that is not trtllm-gen's, no page yet, a flashinfer
    version without a known table and code, a node the kernel table has no family for: rule trtllm.family
    answers that)."""
    from ..kernels.trtllm_gen import phase as tg
    from .capability import capability_major

    page = ctx.get(PAGE_SIZE)
    cap = ctx.get("node.capability")
    entry = _entry_point(backend, phase)
    if entry is None or page is None or not isinstance(cap, int) or capability_major(cap) not in tg.FAMILY_MAJORS:
        return None
    if tg.code_for(ctx.get("node.flashinfer_version")) is None:
        return None
    try:
        call = tg.phase_call(
            entry, query_dtype=ctx["phase.query_dtype"], kv_dtype=ctx["config.kv_dtype"],
            out_dtype=ctx.get("phase.output_dtype") or ctx["config.dtype"], head_dim_qk=ctx["config.head_dim"],
            head_dim_vo=ctx["config.head_dim_vo"], num_qo_heads=ctx["config.num_qo_heads"],
            num_kv_heads=ctx["config.num_kv_heads"], num_speculative_tokens=ctx.get("config.num_speculative_tokens") or 0,
            sliding_window=ctx.get("config.sliding_window"), kv_lora_rank=ctx.get("config.kv_lora_rank"),
            qk_rope_head_dim=ctx.get("config.qk_rope_head_dim"))
    except KeyError:   # a dtype FlashInfer has no Data_type for: the dtype rules answer it
        return None
    if call is None:
        return None
    own = ctx.get("node.trtllm_kernel_table")
    table = None
    if isinstance(own, dict) and "error" in own:
        # a table on disk that is not FlashInfer's: FlashInfer downloads its pin's again (jit/cubin_loader.py
        # get_artifact) where the artifactory answers; elsewhere the node is not ready, said naming the file
        if ctx.get("node.artifactory_reachable") is not True:
            return tg.unusable_table(own["error"])
        d = tg.decide(call, cap, page, str(ctx.get("node.flashinfer_version")))
        return None if d is None else dataclasses.replace(d, table=f"{d.table}; the node's own ({own['error']}) is downloaded again")
    if isinstance(own, dict):   # the node's own table (node/probe.py _kernel_table_fact) decides
        from ..kernels.trtllm_gen.table import TableError

        try:
            table = tg.node_table(own["cubin_dir"], own["pin"], own["checksums_sha256"])
        except (OSError, TableError):   # gone or changed since the probe: FlashInfer downloads its pin's again
            table = None
    return tg.decide(call, cap, page, str(ctx.get("node.flashinfer_version")), table=table)


def _set_kernel_facts(ctx: dict[str, Any], phase: str, backend: str) -> Any:
    d = trtllm_decision(ctx, phase, backend)
    ctx["kernel.trtllm_gen"] = d.function if d is not None else None
    ctx["kernel.trtllm_gen_missing"] = d.missing if d is not None else None
    ctx["kernel.trtllm_gen_decided_by"] = d.provenance() if d is not None else None
    return d


def reads_kernel(check: Check) -> bool:
    reads = set(check.require.reads) | (set(check.when.reads) if check.when is not None else set())
    return any(f in reads for f in KERNEL_FACTS)


def page_domain(ruleset: RuleSet) -> tuple[int, ...]:
    """Every page size a rule names, ascending: the plan picks the smallest valid one (derived, not listed)."""
    return _page_domain(ruleset)


@functools.lru_cache(maxsize=8)
def _page_domain(ruleset: RuleSet) -> tuple[int, ...]:
    values: set[int] = set()

    def walk(p: Any) -> None:
        if isinstance(p, Leaf):
            if p.fact == PAGE_SIZE and p.op in ("in", "eq"):
                values.update(v for v in (p.operand if isinstance(p.operand, tuple) else (p.operand,)) if isinstance(v, int))
        for child in getattr(p, "parts", ()):
            walk(child)
        if hasattr(p, "part"):
            walk(p.part)

    for c in ruleset.checks:
        walk(c.require)
    return tuple(sorted(values))


@dataclass
class CandidateResult:
    phase: str
    backend: str
    violations: list[Violation] = field(default_factory=list)
    pages: tuple[int, ...] = ()
    trace: list[TraceEntry] = field(default_factory=list)
    query_dtype: Optional[str] = None   # the query dtype this phase runs with (engine_rows.query_dtype)
    tensor_cores: Optional[bool] = None  # the engine's use_tensor_cores for this decode (engine_rows.decode_tensor_cores)
    # trtllm-gen phases: per valid page, the kernel FlashInfer loads (attnplan.kernels.trtllm_gen.phase.Decision:
    # function, cubin, sha256, every cubin the serving shapes load, the table and code that decided)
    kernels: dict[int, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations and bool(self.pages)


def output_dtype(rs: Any, backend: str, kv_dtype: str, dtype: str) -> str:
    """The dtype (config vocabulary) a backend's call writes: its family's over this KV dtype (backends.yaml
    families.<f>.output_dtype_over_kv: trtllm-gen's NVFP4 kernels write fp8 only), else the model's."""
    spec = rs.backends.get(backend)
    fam = rs.families.get(spec.family) if spec is not None else None
    return (fam.output_dtype_over_kv.get(kv_dtype) if fam is not None else None) or dtype


def _all_hold(checks: Iterable[Check], ctx: dict[str, Any]) -> bool:
    """Every check whose ``when`` holds here requires what holds here."""
    return all(c.require.test(ctx) for c in checks if c.when is None or c.when.test(ctx))


def run_candidate(checks: Iterable[Check], base: dict[str, Any], phase: str, backend: str,
                  pages: tuple[int, ...], with_trace: bool, engine_spec: Any = None,
                  block_divides: bool = False) -> CandidateResult:
    """The candidate-scope checks over one (phase, backend); page-reading checks keep the sizes that pass.
    ``engine_spec``: the engine layer's data, which decides the phase's query dtype (``phase.query_dtype``).
    ``block_divides``: the asked page is an engine block, served by any kernel page in ``pages`` (its
    divisors): a page check fails only when no such page passes (messages still show the block)."""
    from . import engine_rows

    ctx = dict(base)
    ctx["phase"], ctx["backend"] = phase, backend
    q = engine_rows.query_dtype(engine_spec, ctx) if engine_spec is not None else ctx["config.dtype"]
    ctx["phase.query_dtype"] = q
    tc = engine_rows.decode_tensor_cores(engine_spec, ctx) if engine_spec is not None and phase == "decode" else None
    ctx["phase.decode_tensor_cores"] = tc
    ctx["phase.output_dtype"] = output_dtype(default_ruleset(), backend, ctx["config.kv_dtype"], ctx["config.dtype"])
    res = CandidateResult(phase, backend, tensor_cores=tc, query_dtype=q)
    page_checks: list[Check] = []
    for check in checks:
        if check.scope != "candidate" or not check.applies_to(backend, phase):
            continue
        if reads_page(check):
            page_checks.append(check)
            continue
        if check.when is not None and not check.when.test(ctx):
            if with_trace:
                res.trace.append(trace_entry(check, ctx, phase, backend, "skip"))
            continue
        passed = check.require.test(ctx)
        if not passed:
            res.violations.append(violation(check, ctx, phase, backend))
        if with_trace:
            res.trace.append(trace_entry(check, ctx, phase, backend, "pass" if passed else "fail"))
    ok_pages = []
    # the kernel facts are computed where a rule reads them (trtllm.kernel-missing names its backends)
    kernel_checks = [c for c in page_checks if reads_kernel(c)]
    plain = [c for c in page_checks if not reads_kernel(c)]
    trtllm = bool(kernel_checks)
    for p in pages:
        ctx[PAGE_SIZE] = p
        # FlashInfer's selection (the costly part of a 10.x plan) runs only for a page every other page
        # check passes: a page one of them refuses is refused whatever its kernel (checks are pure, the
        # page passes when all pass), and the kernel facts are set again for the fixed page below
        if not _all_hold(plain, ctx):
            continue
        d = _set_kernel_facts(ctx, phase, backend) if trtllm else None
        if _all_hold(kernel_checks, ctx):
            ok_pages.append(p)
            if d is not None and d.ok:
                res.kernels[p] = d
    res.pages = tuple(ok_pages)
    fixed = base[PAGE_SIZE]
    ctx[PAGE_SIZE] = fixed
    if trtllm:
        # the fixed page's facts; a block the kernel pages divide is judged by those pages (ok_pages)
        _set_kernel_facts(ctx, phase, backend)
        if block_divides and fixed is not None and ctx["kernel.trtllm_gen_missing"] is not None and ok_pages:
            ctx["kernel.trtllm_gen_missing"] = None
        elif fixed is None and not ok_pages and pages:
            # no page passes: the message names the smallest page's missing kernel
            ctx[PAGE_SIZE] = pages[0]
            _set_kernel_facts(ctx, phase, backend)
            ctx[PAGE_SIZE] = fixed
    for check in page_checks:
        if not (check.when is None or check.when.test(ctx)):
            if with_trace:
                res.trace.append(trace_entry(check, ctx, phase, backend, "skip"))
            continue
        passed = bool(ok_pages) if fixed is None or block_divides else check.require.test(ctx)
        if not passed:
            res.violations.append(violation(check, ctx, phase, backend))
        if with_trace:
            entry = trace_entry(check, ctx, phase, backend, "pass" if passed else "fail")
            if fixed is None or block_divides:   # judged over pages: which pass is the input (data)
                entry = dataclasses.replace(entry, inputs={**entry.inputs, PAGE_SIZE: PagesJudged(fixed, tuple(ok_pages))})
            res.trace.append(entry)
    return res


def evaluate_candidate(config: AttentionConfig, node: NodeFacts, phase: str, backend: str, *,
                       ruleset: RuleSet | None = None, engine: EngineLike = None,
                       pages: Optional[tuple[int, ...]] = None, trace: bool = False) -> CandidateResult:
    """Every candidate-scope rule of the engine layer over one (phase, backend), as ``evaluate`` sees it."""
    rs = ruleset or default_ruleset()
    ref = resolve_engine(engine, node, rs)
    node, _ = release_node(rs, ref, node)
    spec = rs.layer(ref.name, ref.version) if ref.name in rs.engines else None
    block = config.page_size
    divides = block is not None and spec is not None and spec.kernel_page == "largest_divisor"
    if pages is None:
        if divides:
            pages = tuple(p for p in sorted(set(page_domain(rs)) | {block}) if block % p == 0)  # type: ignore[operator]
        else:
            pages = (block,) if block is not None else page_domain(rs)
    return run_candidate(active_checks(rs, ref, node.flashinfer_version.value), base_context(config, node),
                         phase, backend, pages, trace, spec, divides)


@dataclass(frozen=True)
class DecodeChoiceMatch:
    """A measured per-shape decode choice that holds for this plan (``decode_choice_for``): the data entry
    (rulepack.DecodeChoiceEntry) and the other decode candidate, which passed every rule as the chosen one did."""

    entry: Any
    alternative: CandidateResult


def _device_name(node: NodeFacts) -> Optional[str]:
    """The node's GPU as devices.yaml names it (the probe's "NVIDIA H100 80GB HBM3" is H100), else None."""
    from .devices import catalog

    name = node.gpu_name.value
    dev = catalog().find(name) if isinstance(name, str) else None
    return dev.name if dev is not None else None


def decode_choice_for(rs: RuleSet, engine: Any, node: NodeFacts, base: dict[str, Any],
                      decode: list[CandidateResult], chosen: CandidateResult, page: int) -> Optional[DecodeChoiceMatch]:
    """The measured per-shape decode choice (rules/decode_choice.yaml, issue 41 item 3) for a plan whose
    decode is ``chosen`` at ``page``, or None - the plan keeps its one decode kernel. An entry holds when it
    speaks for this engine layer (``engine``: the answer's EngineRef), this GPU (devices.yaml name and
    capability), this FlashInfer (an unknown version is not the measured one), and this config shape
    (``when``, judged at the plan's page), and when the other backend it names is one of this phase's
    candidates that passed every rule too (``decode``: the phase's results, in the selection's order - a
    forced backend is the only one, so forcing never switches) at the same page, with the same query and
    output dtypes (the plan's one cache takes the layout either needs: plan.py build_plan). Nothing here decides for an engine that
    picks its own kernel: the loader admits entries for adapter layers only."""
    from packaging.version import InvalidVersion, Version

    if not rs.decode_choices:
        return None
    device = _device_name(node)
    fi = node.flashinfer_version.value
    ctx = dict(base)
    ctx[PAGE_SIZE] = page
    for entry in rs.decode_choices:
        spec = entry.spec
        if spec.engine != engine.name or device not in spec.devices or base.get("node.capability") != entry.capability:
            continue
        try:
            if fi is None or not entry.flashinfer.contains(Version(str(fi)), prereleases=True):
                continue
        except InvalidVersion:
            continue
        if chosen.backend not in (spec.small, spec.large) or (entry.when is not None and not entry.when.test(ctx)):
            continue
        other = spec.large if chosen.backend == spec.small else spec.small
        alt = next((r for r in decode if r.backend == other), None)
        if alt is None or not alt.ok or page not in alt.pages or alt.query_dtype != chosen.query_dtype:
            continue
        kv, dtype = base["config.kv_dtype"], base["config.dtype"]
        if output_dtype(rs, other, kv, dtype) != output_dtype(rs, chosen.backend, kv, dtype):
            continue
        return DecodeChoiceMatch(entry, alt)
    return None

"""Warm-up (docs/contract.md, Errors and exit codes): compile or load exactly the kernels the plan lists, before any request.

Two passes. First every JIT module of ``plan.prefill.modules`` / ``plan.decode.modules`` is
compiled by one ninja over all of them, each module's directory then left as its own build
would leave it (``ninja_builds.py``), then loaded through FlashInfer's own module getters - the
ones the wrappers call at plan time, memoised there, so the wrappers reuse them. Then one tiny
step of each batch kind - prefill-only, decode-only, mixed - runs end to end through the
executor, which loads cubins (trtllm-gen) and anything a wrapper loads lazily. The report says
how long each took and whether the second pass still compiled something (which would mean the
plan's module list missed a kernel the first request would have compiled).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from attnplan.policy import JitModule

from .calls import MERGE_JIT, JitBuild, strategy
from .dtypes import torch_dtype
from .ninja_builds import NinjaBuild, build_together
from .step import StepInput
from attnplan.errors import AdapterCallError


@dataclass
class ModuleTiming:
    name: str
    kind: str
    phase: str
    seconds: float
    how: str


@dataclass
class WarmupReport:
    modules: list[ModuleTiming] = field(default_factory=list)
    batch_kinds: dict[str, float] = field(default_factory=dict)
    helpers: list[ModuleTiming] = field(default_factory=list)
    compiled_during_exercise: list[str] = field(default_factory=list)
    build_seconds: float = 0.0
    seconds: float = 0.0
    # how prefill / mixed steps work out their metadata on the host: host_step.c's library, or numpy and why
    # (host_native.py: the same bytes, more host time a step)
    host_metadata: str = ""
    # how a CUDA step sends and views it: host_torch.cpp's module, or torch calls from Python and why (host_torch.py)
    device_half: str = ""

    def summary(self) -> str:
        mods = ", ".join(f"{m.name} {m.seconds:.1f}s ({m.how})" for m in self.modules) or "none"
        kinds = ", ".join(f"{k} {v * 1e3:.0f}ms" for k, v in self.batch_kinds.items())
        late = f"; compiled late: {self.compiled_during_exercise}" if self.compiled_during_exercise else ""
        host = f"; host metadata: {self.host_metadata}" if self.host_metadata else ""
        host += f"; device half: {self.device_half}" if self.device_half else ""
        return (f"warm-up {self.seconds:.1f}s (build {self.build_seconds:.1f}s): modules [{mods}]; batch kinds "
                f"[{kinds}]{late}{host}")


# The merge of partial states by LSE (flashinfer/cascade.py) is no call's module: the policy lists
# it where a phase merges (policy/plan.py _merge_modules), and warm-up adds it for MLA (``MERGE``).
MERGE_KIND = "merge_state"
MERGE = JitModule(name="merge_state_in_place (cascade)", kind="jit", phase="prefill", backend="flashinfer",
                  params={"kernel": MERGE_KIND})


def _build(mod: JitModule) -> JitBuild:
    """The JIT module ``mod`` names: the merge module, else what the strategy of its phase's call
    builds from the module's params (``_with_phase`` adds the call and what the strategy reads
    from the phase plan: FlashInfer's backend argument, never derived from the backend's name)."""
    p = mod.params
    if p["kernel"] == MERGE_KIND:
        return MERGE_JIT
    build = strategy(p["call"]).jit(p)
    if build is None:
        raise AdapterCallError(f"no loader for plan module {mod.name} (the call {p['call']!r} loads cubins)")
    return build


def _module_args(mod: JitModule) -> tuple[str, str, tuple]:
    """(getter kind, FlashInfer backend argument, the positional args its caller passes at plan time)."""
    b = _build(mod)
    return b.getter.kind, b.backend, b.args


def _module_loader(mod: JitModule) -> Optional[Callable[[], Any]]:
    """The FlashInfer getter that builds and loads ``mod``: the one its wrapper calls at plan
    time with the same arguments (FlashInfer memoises it, so the wrapper reuses the module)."""
    if mod.kind == "cubin":
        return None              # trtllm-gen cubins load on first call: the exercise pass does it
    b = _build(mod)
    return b.getter.loader(b.backend, b.args)


def _module_spec(mod: JitModule) -> Any:
    """The JitSpec ``_module_loader`` builds (FlashInfer 0.7.2.post1's getters, unrolled)."""
    b = _build(mod)
    return b.getter.spec(b.backend, b.args)


def _with_phase(mod: JitModule, plan: Any) -> JitModule:
    """``mod`` with what its loader needs from its phase plan (the call whose strategy builds it,
    FlashInfer's backend argument, the query rows per request, tensor-core decode), where the
    policy's module params do not carry them already."""
    pp = getattr(plan, mod.phase)
    extra = {k: v for k, v in (("call", pp.call), ("flashinfer_backend", pp.flashinfer_backend),
                                ("q_len_per_req", pp.q_len_per_req), ("use_tensor_cores", pp.use_tensor_cores))
             if k not in mod.params}
    return mod.model_copy(update={"params": {**mod.params, **extra}}) if extra else mod


def plan_modules(plan: Any) -> list[JitModule]:
    """Every module a plan's steps load: the plan's lists, plus - the one module warm-up adds -
    FlashInfer's merge kernel where the plan merges partial states (a prefill phase that must
    return LSE to merge MLA chunked-prefill context, seed 004) and the plan does not list it."""
    mods = {m.name: _with_phase(m, plan) for m in (*plan.prefill.modules, *plan.decode.modules)}
    if needs_merge(plan) and not any(m.params.get("kernel") == MERGE_KIND for m in mods.values()):
        mods[MERGE.name] = MERGE
    return list(mods.values())


def needs_merge(plan: Any) -> bool:
    """MLA chunked prefill merges the context part into the new-token part by LSE with
    FlashInfer's ``merge_state_in_place`` (``FlashInferBackend.merge``), whichever call runs the
    two parts (ragged_prefill or trtllm_ragged: both return LSE), so an MLA plan loads it."""
    return bool(plan.kv_cache.mla and plan.prefill.returns_lse)


def prebuild(modules: list[JitModule], progress: Optional[Callable[[dict], None]] = None) -> float:
    """Compile every JIT module that needs it with one ninja of ``MAX_JOBS`` jobs, leaving each
    module's directory as its getter's own build would (``ninja_builds.py`` says why); seconds."""
    from contextlib import ExitStack

    from filelock import FileLock

    specs = {}
    for mod in modules:
        if mod.kind == "jit":
            spec = _module_spec(mod)
            aot = getattr(spec, "aot_path", None)
            if aot is None or not Path(aot).exists():      # an AOT build loads as is, as the getter's does
                specs[spec.name] = spec
    t0 = time.perf_counter()
    if progress:
        progress({"event": "build-start", "modules": sorted(specs)})
    with ExitStack() as locks:
        builds = []
        for spec in sorted(specs.values(), key=lambda sp: sp.name):     # one lock order for every process
            locks.enter_context(FileLock(spec.lock_path, thread_local=False))
            spec.write_ninja()
            builds.append(NinjaBuild(spec.build_dir, spec.ninja_path, len(getattr(spec, "sources", ()) or ())))
        built = build_together(builds)
    seconds = time.perf_counter() - t0
    if progress:
        progress({"event": "build-done", "seconds": seconds, "built": [b.workdir.name for b in built]})
    return seconds


def _jit_dir() -> Optional[Path]:
    try:
        from flashinfer.jit import env

        return Path(env.FLASHINFER_JIT_DIR)
    except Exception:  # noqa: BLE001 - no flashinfer: nothing to watch
        return None


def _built(root: Optional[Path]) -> dict[str, int]:
    """Every compiled module under ``root`` with its mtime: a module rebuilt in place counts too."""
    if root is None or not root.exists():
        return {}
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*.so")}


def dummy_inputs(ex: Any, kind: str) -> tuple[StepInput, int]:
    """A tiny batch of ``kind`` whose shapes follow the plan: decode requests carry the plan's
    q_len_per_req; one prefill request has cached context and one has none."""
    import torch

    page = ex.plan.kv_cache.page_size
    qd = ex.plan.decode.q_len_per_req
    q_lens, seq = [], []
    if kind in ("decode_only", "mixed"):
        q_lens += [qd, qd]
        seq += [qd + 3, page + qd]
    nd = len(q_lens)
    if kind in ("prefill_only", "mixed"):
        q_lens += [5, 3]
        seq += [5, page + 3]
    width = max((s + page - 1) // page for s in seq)
    pages = torch.arange(len(seq) * width, dtype=torch.int32).view(len(seq), width)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    inp = StepInput(query_lens=q_lens, seq_lens=seq_t.to(ex.device), block_table=pages.to(ex.device),
                    num_decodes=nd, seq_lens_cpu=seq_t)
    return inp, len(seq) * width


def exercise(ex: Any, kind: str) -> None:
    """One step of ``kind`` through the executor, end to end (append, plan, run)."""
    import torch

    inp, num_pages = dummy_inputs(ex, kind)
    cache = ex.allocate_kv_cache(num_pages)
    p = ex.params
    gen = torch.Generator(device=ex.device).manual_seed(0)
    q_dtype = torch_dtype(ex.plan.decode.output_dtype)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen, device=ex.device).to(q_dtype)

    step = ex.plan_step(inp)
    t = step.num_tokens
    if ex.plan.kv_cache.mla:
        ex.append_latent(step, cache, rnd(t, ex.plan.kv_cache.head_dim_k))
        if step.decode is not None:
            n = step.decode.num_tokens
            ex.mla_decode(step, rnd(n, p.num_qo_heads, p.kv_lora_rank), rnd(n, p.num_qo_heads, p.qk_rope_head_dim), cache)
        if step.prefill is not None:
            n = step.prefill.num_tokens
            c = step.extra["context_tokens"]
            ctx = (rnd(c, p.num_qo_heads, p.head_dim_qk), rnd(c, p.num_qo_heads, p.head_dim_vo))
            ex.mla_prefill(step, rnd(n, p.num_qo_heads, p.head_dim_qk), rnd(n, p.num_qo_heads, p.head_dim_qk),
                           rnd(n, p.num_qo_heads, p.head_dim_vo), context=ctx)
    else:
        ex.append_kv(step, cache, rnd(t, p.num_kv_heads, p.head_dim_qk), rnd(t, p.num_kv_heads, p.head_dim_vo))
        sinks = torch.randn(p.num_qo_heads, generator=gen, device=ex.device) if p.sinks else None
        ex.forward(step, rnd(t, p.num_qo_heads, p.head_dim_qk), cache, sinks=sinks)


def warmup(ex: Any, progress: Optional[Callable[[dict], None]] = None, *, parallel: bool = True) -> WarmupReport:
    import torch

    from . import host_native

    say = progress or (lambda _e: None)
    st = host_native.status()
    report = WarmupReport(host_metadata=f"host_step.c ({st['path']})" if st["compiled"] else f"numpy ({st['why']})")
    if ex.device.type == "cuda":
        from . import host_torch

        tt = host_torch.status()          # built with the executor's staging: loaded already, or why not
        report.device_half = f"host_torch.cpp ({tt['path']})" if tt["compiled"] else f"torch from Python ({tt['why']})"
    t_start = time.perf_counter()
    if ex.backend.name == "flashinfer":
        modules = plan_modules(ex.plan)
        try:
            report.build_seconds = prebuild(modules, say)
        except Exception as exc:  # noqa: BLE001 - fall back to the getters (they build one by one)
            say({"event": "build-fallback", "error": f"{type(exc).__name__}: {exc}"})

        def load(mod: JitModule) -> ModuleTiming:
            loader = _module_loader(mod)
            t0 = time.perf_counter()
            if loader is not None:
                loader()
            timing = ModuleTiming(mod.name, mod.kind, mod.phase, time.perf_counter() - t0,
                                  "jit" if loader is not None else "cubin: loaded at first call")
            say({"event": "module-loaded", "module": mod.name, "seconds": timing.seconds})
            return timing

        with ThreadPoolExecutor(max_workers=len(modules) if parallel else 1) as pool:
            for mod, timing in zip(modules, pool.map(load, modules)):
                (report.helpers if mod is MERGE else report.modules).append(timing)
    jit_dir = _jit_dir() if ex.backend.name == "flashinfer" else None
    before = _built(jit_dir)
    for kind in ("prefill_only", "decode_only", "mixed"):
        say({"event": "batch-kind-start", "kind": kind})
        t0 = time.perf_counter()
        exercise(ex, kind)
        if ex.device.type == "cuda":
            torch.cuda.synchronize(ex.device)
        report.batch_kinds[kind] = time.perf_counter() - t0
        say({"event": "batch-kind-done", "kind": kind, "seconds": report.batch_kinds[kind]})
    after = _built(jit_dir)
    report.compiled_during_exercise = sorted(p for p, mtime in after.items() if before.get(p) != mtime)
    report.seconds = time.perf_counter() - t_start
    say({"event": "done", "seconds": report.seconds})
    return report

"""Shared pieces of the GPU tests: plans on the live node, random paged batches, the float32
reference over the K/V the test keeps, and one parallel build of every module a test file needs."""

from __future__ import annotations

import contextlib
import gc
import os
import random
import time
from typing import Any

import torch

from attnplan import AttentionConfig, plan_for   # this machine probed when no node is given (attnplan/embedded.py)

from attnplan.adapter import AttentionExecutor, StepInput, attention_ref
from attnplan.adapter import kv_cache as kvc

# Fresh inputs every run; the seed is printed so a failure can be replayed: ATTNPLAN_GPU_SEED=<it> runs it again.
SEED = int(os.environ.get("ATTNPLAN_GPU_SEED") or int.from_bytes(os.urandom(4), "little"))
print(f"[gpu tests] random seed {SEED}")
TOL = 1e-2


def answer(engine: str = "flashinfer", **cfg: Any):
    """The plan on this machine's probed facts; kernel truth by default (these tests exercise the
    native kernels: ``--engine vllm`` decodes with XQA on 9.0, tested in test_adapter_kernel_paths_gpu.py)."""
    a = plan_for(AttentionConfig(**cfg), engine=engine)
    assert a.ok, a.violations
    return a


def executor(**cfg: Any) -> AttentionExecutor:
    return AttentionExecutor(answer(**cfg), device="cuda")


# Facts the GPU box lacks and a serving node has (issue 22): the cubin artifactory is reachable
# and the cubin directory holds the trtllm-gen cubins. Declared on top of this machine's probed
# facts, so vLLM's own plan on the H100 (XQA decode) comes from the packs, not from a hand-made plan.
DECLARED = {"artifactory_reachable": True, "cubin_dir_has_cubins": True}


def probed_node(**declared: Any):
    """This machine's probed facts with ``DECLARED`` (and ``declared``) set as declared facts."""
    from attnplan.node import local_node
    from attnplan.policy.facts import Fact

    node = local_node()
    return node.model_copy(update={k: Fact.declared(v, "gpu tests: a serving node has it")
                                   for k, v in {**DECLARED, **declared}.items()})


class NoRealPlan(RuntimeError):
    """The rules plan no such path on this node (the config, the refusal or the other path named)."""


def plan_or_raise(cfg: dict, engine: str, want: Any, why: str) -> Any:
    """The rules' own plan for ``cfg`` on the probed node, or NoRealPlan saying why not: what the
    GPU tests (``real_plan``) and the benches (bench/decode_steps.py, bench/xqa_vs_fa2.py) run."""
    try:
        a = plan_for(AttentionConfig(**cfg), probed_node(), engine=engine)
    except ValueError as exc:
        raise NoRealPlan(f"no real plan for {why}: the config is invalid ({exc})") from None
    if not a.ok:
        raise NoRealPlan(f"no real plan for {why}: " + "; ".join(f"{v.rule}: {v.message}" for v in a.violations))
    if not want(a):
        raise NoRealPlan(f"the rules plan another path than {why}: prefill {a.plan.prefill.backend}/"
                         f"{a.plan.prefill.call}, decode {a.plan.decode.backend}/{a.plan.decode.call}")
    return a


def real_plan(cfg: dict, engine: str, want: Any, why: str) -> Any:
    """The rules' own plan for ``cfg`` on the probed node; a test whose path the rules do not plan
    fails saying so (no hand-derived plan stands in)."""
    import pytest

    try:
        return plan_or_raise(cfg, engine, want, why)
    except NoRealPlan as exc:
        pytest.fail(str(exc))


def executor_for(a: Any) -> AttentionExecutor:
    """An executor over a real plan, checked against this node like any other."""
    return AttentionExecutor(a, device="cuda", node=probed_node()) if _takes_node() else AttentionExecutor(a, device="cuda")


def _takes_node() -> bool:
    import inspect

    return "node" in inspect.signature(AttentionExecutor.__init__).parameters


def prebuild(*answers: Any) -> None:
    """Compile every module these plans need (warm-up's prebuild, all cores) before the first test."""
    from attnplan.adapter.warmup import plan_modules, prebuild as build

    mods = {m.name: m for a in answers for m in plan_modules(a.plan)}
    t0 = time.perf_counter()
    build(list(mods.values()))
    print(f"[gpu tests] prebuilt {len(mods)} modules in {time.perf_counter() - t0:.1f}s: {sorted(mods)}")


def settled_memory() -> tuple[int, int]:
    """CUDA memory allocated and reserved once earlier tests' garbage is collected, so that a
    collection inside the code under test cannot make memory move (it freed 350 MB once). Take
    it before the code under test only; read memory after it without collecting."""
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


@contextlib.contextmanager
def no_device_sync():
    """Inside, any device-to-host synchronization raises (torch's sync-debug mode): seed 001's
    promise that a step reads nothing back from the device. Synchronizes before and after."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


def up_projection(heads: int, rnd: Any) -> Any:
    """A random MLA up-projection (kv_b_proj, DeepSeek's 512-rank latent to ``heads`` x (128 + 64) K and
    x 128 V, weights from ``rnd(*shape)``): latent rows [T, 576] -> (K [T, heads, 192], V [T, heads, 128])."""
    w_k, w_v = rnd(512, heads, 128).float() / 20, rnd(512, heads, 128).float() / 20

    def up(latent: Any) -> tuple[Any, Any]:
        ckv = latent[:, :512].float()
        k = torch.cat([torch.einsum("tc,chd->thd", ckv, w_k), latent[:, 512:].float().unsqueeze(1).expand(-1, heads, -1)], -1)
        return k.bfloat16(), torch.einsum("tc,chd->thd", ckv, w_v).bfloat16()
    return up


def chunked_prefill_ref(q: Any, k_new: Any, v_new: Any, k_ctx: Any, v_ctx: Any, new: list[int], ctx: list[int],
                        sm_scale: float) -> Any:
    """MLA chunked prefill's float32 reference: each request's new tokens over its context and themselves
    (``k_ctx`` / ``v_ctx`` ragged by ``ctx``, the new tokens' by ``new``)."""
    refs, o, c0 = [], 0, 0
    for n, c in zip(new, ctx):
        k = torch.cat([k_ctx[c0:c0 + c], k_new[o:o + n]])
        v = torch.cat([v_ctx[c0:c0 + c], v_new[o:o + n]])
        refs.append(attention_ref(q[o:o + n], k, v, sm_scale=sm_scale)[0])
        o, c0 = o + n, c0 + c
    return torch.cat(refs)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not out.isnan().any(), "output has NaN (unwritten rows?)"
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


class Batch:
    """A random paged batch: history already in the cache, this step's tokens appended by the
    executor; ``ks``/``vs`` keep every token's K/V for the reference."""

    def __init__(self, ex: AttentionExecutor, q_lens: list[int], seq: list[int], nd: int, *,
                 k_scale: float = 1.0, gen: torch.Generator | None = None, host: bool = True,
                 reuse: "Batch | None" = None, poison: str = "nan"):
        """``poison``: what every slot holds before the history is written - ``nan`` (a kernel
        reading a slot nobody wrote shows NaN), ``finite`` (large finite garbage: what freed
        pages of other requests hold, for kernels that read whole last pages, like XQA) or
        ``none`` (the cache as the adapter allocates it)."""
        self.ex, self.q_lens, self.seq, self.nd = ex, q_lens, seq, nd
        self.gen = gen or torch.Generator(device="cuda").manual_seed(SEED + sum(seq))
        p, page = ex.params, ex.plan.kv_cache.page_size
        if reuse is not None:
            # Same pages and cache as an earlier batch (a captured graph's addresses), new lengths.
            assert max(seq) <= reuse.table.shape[1] * page and len(seq) == len(reuse.seq)
            self.table, self.cache = reuse.table.flip(0).contiguous(), reuse.cache
        else:
            width = max((s + page - 1) // page for s in seq)
            n_pages = len(seq) * width
            self.table = torch.randperm(n_pages, device="cuda", generator=self.gen).view(len(seq), width).int()
            self.cache = ex.allocate_kv_cache(n_pages)
            if poison == "nan":
                # Poison the whole cache: a kernel reading a slot nobody wrote would show NaN.
                self.cache.data.fill_(0x7F if self.cache.data.dtype == torch.uint8 else float("nan"))
                if self.cache.scales is not None:
                    self.cache.scales.view(torch.uint8).fill_(0x7F)
            elif poison == "finite":
                # Large finite values: fp8 bytes below 0x60 are finite (e4m3 up to 30, e5m2 up to 3e4).
                if self.cache.data.dtype == torch.uint8:
                    self.cache.data.random_(0, 0x60, generator=self.gen)
                else:
                    self.cache.data.normal_(0, 100.0, generator=self.gen)
        self.k_scale = k_scale
        self.ks = [self.rand(s, p.num_kv_heads, p.head_dim_qk) for s in seq]
        self.vs = [self.rand(s, p.num_kv_heads, p.head_dim_vo) for s in seq]
        for r, (s, n) in enumerate(zip(seq, q_lens)):
            if s > n:
                pos = torch.arange(s - n, device="cuda")
                slots = self.table[r, pos // page].long() * page + pos % page
                kvc.append(self.cache, slots, self.ks[r][: s - n], self.vs[r][: s - n], k_scale=k_scale, v_scale=k_scale)
        seq_t = torch.tensor(seq, dtype=torch.int32)
        self.input = StepInput(query_lens=q_lens, seq_lens=seq_t.cuda(), block_table=self.table, num_decodes=nd,
                               seq_lens_cpu=seq_t if host else None)
        self.q = self.rand(sum(q_lens), p.num_qo_heads, p.head_dim_qk)
        self.sinks = (torch.randn(p.num_qo_heads, device="cuda", generator=self.gen) * 2).float() if p.sinks else None

    def rand(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=self.gen).to(torch.bfloat16)

    def new_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        k = torch.cat([k[s - n:] for k, s, n in zip(self.ks, self.seq, self.q_lens)])
        v = torch.cat([v[s - n:] for v, s, n in zip(self.vs, self.seq, self.q_lens)])
        return k, v

    def run(self) -> torch.Tensor:
        ex = self.ex
        step = ex.plan_step(self.input)
        ex.append_kv(step, self.cache, *self.new_kv(), k_scale=self.k_scale, v_scale=self.k_scale)
        out = torch.full((step.num_tokens, ex.params.num_qo_heads, ex.params.head_dim_vo), float("nan"),
                         dtype=torch.bfloat16, device="cuda")
        ex.forward(step, self.q, self.cache, out, k_scale=self.k_scale, v_scale=self.k_scale, sinks=self.sinks)
        torch.cuda.synchronize()
        return out

    def reference(self, q_dtype: Any = None) -> torch.Tensor:
        """float32 attention over what the cache holds (dequantized); ``q_dtype``: round the
        query through that dtype first (what a kernel that quantizes the query computes)."""
        p = self.ex.params
        view = self.ex.plan.kv_cache.kv_view_dtype
        s = self.k_scale

        def stored(x: torch.Tensor) -> torch.Tensor:     # what the cache holds, dequantized
            if "float8" in view:
                return (x.float() / s).to(getattr(torch, view)).float() * s
            if view == "nvfp4":
                from attnplan.adapter import nvfp4

                return nvfp4.dequantize(*nvfp4.quantize(x, 16, s), 16, s)
            return x.float()

        q_all = self.q if q_dtype is None else self.q.float().to(q_dtype).float()
        outs, t = [], 0
        for r, (L, n) in enumerate(zip(self.seq, self.q_lens)):
            o, _ = attention_ref(q_all[t:t + n], stored(self.ks[r]), stored(self.vs[r]), sm_scale=p.sm_scale,
                                 causal=True, window_left=p.window_left, soft_cap=p.soft_cap, sinks=self.sinks)
            outs.append(o)
            t += n
        return torch.cat(outs)


LENS = random.Random(SEED)


def random_lens(n: int, lo: int, hi: int) -> list[int]:
    return [LENS.randint(lo, hi) for _ in range(n)]
